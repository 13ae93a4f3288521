#pragma once
// The actors of a run under CAF's deterministic test coordinator (caf/test/dsl.hpp): the real generator (search
// policy), reward normalizer, optimizer and telemetry, and a coordinator driving one best-of-N unit of relu (a group
// of two samples). The test's own scoped actors pull as evaluators of the coordinator's node or of a joined node,
// so each ordering is chosen by the test, not by timing. Include after defining CAF_SUITE and caf/test/dsl.hpp.
#include <caf/all.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "actors/coordinator.h"
#include "actors/node/actor_system_config.h"
#include "actors/optimizer.h"
#include "actors/reward_normalizer.h"
#include "actors/rollout_generator.h"
#include "actors/telemetry.h"
#include "experiment/experiment.h"
#include "modes/unit_plan.h"
#include "policy/search_policy.h"
#include "run/jsonl.h"
#include "run/run_directory.h"
#include "tasks/task_loader.h"

using namespace crucible;
using namespace crucible::actors;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kRefused = -1;

struct Config : caf::actor_system_config {
  Config() { node::configure_actor_system(*this, 1); }
};

// One best-of-N unit: a group of two samples of relu.
const char* kExperiment = R"([experiment]
name = "dsl"
mode = "best_of_n"
[tasks]
names = ["relu"]
[best_of_n]
k = 2
group_size = 2
[eval]
devices = ["cpu"]
)";

msg::VerdictReport verdict(int64_t id, eval::Status status) {
  eval::Verdict v;
  v.task = "relu";
  v.status = status;
  if (status == eval::Status::correct) {
    v.candidate_time = eval::TimingStats{3, 10, 10, 10, 10, 0};
    v.reference_time = eval::TimingStats{3, 20, 20, 20, 20, 0};
    v.speedup = 2.0;
  }
  return msg::report(static_cast<uint64_t>(id), v);
}

struct Fixture : test_coordinator_fixture<Config> {
  fs::path dir;
  experiment::Experiment e;
  generator_actor generator;
  normalizer_actor normalizer;
  optimizer_actor optimizer;
  telemetry_actor telemetry;
  coordinator_actor coordinator;
  caf::scoped_actor other{sys};   // a second evaluator
  caf::scoped_actor third{sys};   // a third

  Fixture() {
    dir = fs::temp_directory_path() / ("crucible-dsl-" + std::to_string(std::random_device{}()));
    e = experiment::parse_experiment(kExperiment, "dsl.toml");
    auto task = tasks::load_task_file(fs::path(CRUCIBLE_SOURCE_DIR) / "configs/tasks/relu.toml");
    policy::SearchPolicyOptions options;
    options.language = eval::CandidateLanguage::cpp();
    auto leases = std::make_shared<devices::DeviceLeases>();
    auto g = std::make_shared<GeneratorSetup>();
    g->policy = std::make_unique<policy::SearchPolicy>(1, options);
    g->tasks[task.name] = task;
    g->leases = leases;
    auto o = std::make_shared<OptimizerSetup>();
    o->policy = std::make_unique<policy::SearchPolicy>(1, options);
    o->leases = leases;
    generator = sys.spawn(rollout_generator, g);
    normalizer = sys.spawn(reward_normalizer, NormalizerSetup{e.reward, e.advantage, e.task_baseline, e.multi_turn});
    optimizer = sys.spawn(actors::optimizer, o);
    telemetry = sys.spawn(actors::telemetry, std::make_shared<run::RunDirectory>(run::RunDirectory::create(dir / "seed-1", kExperiment)), true);
    CoordinatorSetup setup;
    setup.mode = "best_of_n";
    setup.units = modes::plan_units(e, {"relu"});
    setup.compile_locally = false;  // candidates go out as source, as to evaluator nodes
    setup.generator = generator;
    setup.normalizer = normalizer;
    setup.optimizer = optimizer;
    setup.telemetry = telemetry;
    coordinator = spawn_coordinator(sys, std::move(setup));
    run();
  }

  ~Fixture() override {
    run();  // what is still in flight lands before the directory goes
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  // Starts the run and lets the generator answer: both candidates are then queued for evaluation.
  void start_and_generate() {
    self->send(coordinator, run_atom_v);
    expect((run_atom), from(self).to(coordinator));
    expect((msg::GenerateRequest), from(coordinator).to(generator));
    trigger_timeouts();  // the generator's batching delay
    expect((flush_atom), to(generator));
    expect((msg::Generated), from(generator).to(coordinator));
  }

  // The group's last verdict has arrived: it is scored once, its two records written, the unit committed, and the
  // run over.
  void expect_group_committed() {
  expect((msg::ScoreRequest), from(coordinator).to(normalizer));
  expect((msg::ScoredGroup), from(normalizer).to(coordinator));
  expect((msg::CandidateRecord), from(coordinator).to(telemetry));
  expect((msg::CandidateRecord), from(coordinator).to(telemetry));
  expect((msg::CommitUnit), from(coordinator).to(telemetry));
  expect((committed_atom), from(telemetry).to(coordinator));
  expect((msg::RunOutcome), from(coordinator).to(self));
  }

  // A pull from `evaluator` under `session`, answered with a request (none: refused).
  template <class Handle>
  std::optional<msg::EvalRequest> pull_request(Handle& evaluator, uint64_t session) {
    auto handle = evaluator->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cpu"), session);
    run();
    std::optional<msg::EvalRequest> request;
    handle.receive([&](msg::EvalRequest& r) { request = std::move(r); }, [](caf::error&) {});
    return request;
  }

  // The same, answered with the candidate's id (kRefused: refused).
  template <class Handle>
  int64_t pull(Handle& evaluator, uint64_t session) {
    auto request = pull_request(evaluator, session);
    return request ? static_cast<int64_t>(request->candidate.id) : kRefused;
  }
};

}  // namespace

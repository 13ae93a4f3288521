// The coordinator actor under CAF's deterministic test coordinator: every message stepped one at a time, with the
// real generator (search policy), reward normalizer and telemetry. The test's own scoped actors pull as evaluators
// of the coordinator's node or of a joined node, so each ordering is chosen by the test, not by timing.
#define CAF_SUITE coordinator_actor
#include <caf/test/dsl.hpp>
#include <caf/test/unit_test_impl.hpp>

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
    options.backend = "cpu";
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

CAF_TEST_FIXTURE_SCOPE(coordinator_actor_tests, Fixture)

CAF_TEST(a verdict counts only from the evaluator that holds the candidate and a group is scored once) {
  start_and_generate();
  const int64_t first = pull(self, 0);
  const int64_t second = pull(other, 0);
  CAF_REQUIRE_NOT_EQUAL(first, kRefused);
  CAF_REQUIRE_NOT_EQUAL(second, kRefused);
  CAF_REQUIRE_NOT_EQUAL(first, second);
  // `other` reports on the candidate `self` holds: discarded, recorded as a late result, nothing scored.
  other->send(coordinator, verdict(first, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // The holder's verdict counts; the group is not complete yet.
  self->send(coordinator, verdict(first, eval::Status::incorrect));
  expect((msg::VerdictReport), from(self).to(coordinator));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // A second verdict from the same evaluator for the same candidate: it no longer holds it.
  self->send(coordinator, verdict(first, eval::Status::correct));
  expect((msg::VerdictReport), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // The last verdict completes the group: scored once, then the unit is committed and the run is over.
  other->send(coordinator, verdict(second, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect_group_committed();
  // Its records: the first candidate as its holder judged it (incorrect), not as the stranger or the repeat said.
  std::map<int64_t, std::string> status;
  for (const auto& r : run::read_jsonl(dir / "seed-1" / "candidates.jsonl"))
    status[r["candidate_id"].get<int64_t>()] = r["status"].get<std::string>();
  CAF_CHECK_EQUAL(status.size(), 2u);
  CAF_CHECK_EQUAL(status[first], "incorrect");
  CAF_CHECK_EQUAL(status[second], "correct");
}

CAF_TEST(reference timings an evaluator reports go with the next candidate of the task and the first report of a key stays) {
  const auto timing = [](std::string task, std::string key, double median_us) {
    return eval::SharedTiming{std::move(task), std::move(key), eval::TimingStats{5, median_us, median_us, median_us,
                                                                                 median_us, 0.001},
                              eval::RefreshChoice::whole};
  };
  start_and_generate();
  auto first = pull_request(self, 0);
  CAF_REQUIRE(first);
  CAF_CHECK(first->reference_timings.empty());  // nobody has timed relu yet
  // The report brings one usable entry, one for another task and one that is no measurement (median 0).
  auto report = verdict(static_cast<int64_t>(first->candidate.id), eval::Status::correct);
  report.reference_timings = {timing("relu", "relu|H100", 20.0), timing("gelu", "gelu|H100", 30.0),
                              timing("relu", "relu|H200", 0.0)};
  self->send(coordinator, report);
  expect((msg::VerdictReport), from(self).to(coordinator));
  auto second = pull_request(other, 0);
  CAF_REQUIRE(second);
  CAF_REQUIRE_EQUAL(second->reference_timings.size(), 1u);
  CAF_CHECK_EQUAL(second->reference_timings[0].key, "relu|H100");
  CAF_CHECK_EQUAL(second->reference_timings[0].reference.median_us, 20.0);
  CAF_CHECK(second->reference_timings[0].refresh == eval::RefreshChoice::whole);
  // A second report of the same key changes nothing (every evaluator that takes it uses the same numbers); the
  // group completes and the run ends as usual.
  auto last = verdict(static_cast<int64_t>(second->candidate.id), eval::Status::correct);
  last.reference_timings = {timing("relu", "relu|H100", 25.0)};
  other->send(coordinator, last);
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect_group_committed();
  CAF_CHECK_EQUAL(run::read_jsonl(dir / "seed-1" / "candidates.jsonl").size(), 2u);
}

CAF_TEST(a lost node gives its candidate back and its waiting evaluators are refused and its late verdict discarded) {
  const uint64_t session = 0x1234500000001ull;
  self->send(coordinator, msg::NodeJoined{session, "gpu-box", sys.node(), {}});
  expect((msg::NodeJoined), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  start_and_generate();
  const int64_t on_node = pull(other, session);  // the node's evaluator takes the first
  const int64_t here = pull(self, 0);           // the local one the second
  CAF_REQUIRE_NOT_EQUAL(on_node, kRefused);
  CAF_REQUIRE_NOT_EQUAL(here, kRefused);
  // A third evaluator of the node waits; then the node is lost.
  auto waiting = third->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cuda:1"), session);
  run();
  self->send(coordinator, msg::NodeLost{session, "no heartbeat for 2 s"});
  expect((msg::NodeLost), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  run();
  bool refused = false;
  waiting.receive([](msg::EvalRequest&) {},
                  [&](caf::error& err) { refused = msg::cluster_code(err) == msg::cluster_error::session_lost; });
  CAF_CHECK(refused);
  // A pull under the lost session is refused too; the local evaluator gets the node's candidate back.
  CAF_CHECK_EQUAL(pull(third, session), kRefused);
  self->send(coordinator, verdict(here, eval::Status::correct));
  expect((msg::VerdictReport), from(self).to(coordinator));
  CAF_CHECK_EQUAL(pull(self, 0), on_node);
  // The lost node's result arrives after all: discarded.
  other->send(coordinator, verdict(on_node, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  self->send(coordinator, verdict(on_node, eval::Status::incorrect));
  expect((msg::VerdictReport), from(self).to(coordinator));
  expect((msg::ScoreRequest), from(coordinator).to(normalizer));
}

CAF_TEST(pulls after the run is over are refused with run_over) {
  start_and_generate();
  const int64_t a = pull(self, 0);
  const int64_t b = pull(other, 0);
  auto waiting = third->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cpu"), uint64_t{0});
  run();
  self->send(coordinator, verdict(a, eval::Status::correct));
  other->send(coordinator, verdict(b, eval::Status::correct));
  run();
  bool over = false;
  waiting.receive([](msg::EvalRequest&) {},
                  [&](caf::error& err) { over = msg::cluster_code(err) == msg::cluster_error::run_over; });
  CAF_CHECK(over);
}

CAF_TEST_FIXTURE_SCOPE_END()

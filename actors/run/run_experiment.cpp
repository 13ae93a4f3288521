#include "actors/run/run_experiment.h"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "actors/compiler_pool.h"
#include "actors/run/archived_states.h"
#include "openai_policy/openai_policy.h"
#include "actors/coordinator.h"
#include "actors/evaluator.h"
#include "actors/gateway.h"
#include "actors/optimizer.h"
#include "actors/reward_normalizer.h"
#include "actors/rollout_generator.h"
#include "actors/telemetry.h"
#include "config/text_file.h"
#include "cluster/join_proof.h"
#include "actors/node/transport.h"
#include "config/toml_reader.h"
#include "logging/log.h"
#include "modes/run_summary.h"
#include "actors/node/eval_settings.h"
#include "modes/unit_plan.h"
#include "run/run_metadata.h"
#include "monitor/monitor_server.h"
#include "actors/node/actor_system_config.h"
#include "policy/kernel_templates.h"
#include "lm/policy/lm_policy.h"
#include "policy/replay_policy.h"
#include "policy/search_policy.h"
#include "run/run_directory.h"
#include "run/task_record.h"

namespace crucible::node {
namespace fs = std::filesystem;
namespace {

// What the run's candidates are written in, as the policies take it.
eval::CandidateLanguage candidate_language(const experiment::Experiment& e) { return {e.eval.backend, e.eval.kind}; }

// The door for evaluator nodes, published on [cluster] listen. Throws std::runtime_error when it cannot listen.
actors::gateway_actor open_gateway(caf::actor_system& system, const experiment::Experiment& e, actors::coordinator_actor coordinator,
                         uint64_t seed, bool last_run, const std::vector<eval::TaskSpec>& tasks,
                         const fs::path& log_dir) {
  actors::GatewaySetup g;
  g.secret = cluster::read_secret_file(e.cluster.secret_file);
  g.coordinator = coordinator;
  g.run = e.name + " seed " + std::to_string(seed);
  g.eval = e.eval;  // the settings part of the [eval] table
  g.tasks = task_texts(tasks);
  g.heartbeat_s = e.cluster.heartbeat_s;
  g.timeout_s = e.cluster.node_timeout_s;
  g.last_run = last_run;
  g.log_dir = log_dir;
  auto gateway = actors::spawn_gateway(system, std::move(g));
  auto port = node::publish(gateway, e.cluster.host, e.cluster.port, e.cluster.tls());
  if (!port) {
    caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    throw std::runtime_error("cannot listen for nodes on " + e.cluster.listen + ": " + system.render(port.error()));
  }
  log::Logger{"node"}.info("listening for evaluator nodes on ", e.cluster.listen, e.cluster.tls() ? " (TLS)" : "");
  return gateway;
}

// `weights_of`: a language model policy made before, whose weights this one reads rather than loading its own.
std::unique_ptr<policy::Policy> make_policy(const experiment::Experiment& e, uint64_t seed, const fs::path& seed_dir,
                                            const policy::Policy* weights_of = nullptr) {
  if (e.policy.kind == experiment::PolicyKind::libtorch) {
    policy::LmPolicySetup s;
    s.config = e.policy;
    s.language = candidate_language(e);
    s.state_dir = seed_dir / "policy";
    s.per_task_adapters = e.mode == experiment::RunMode::ttt;
    s.seed = seed;
    if (const auto* loaded = dynamic_cast<const policy::LmPolicy*>(weights_of))
      return std::make_unique<policy::LmPolicy>(std::move(s), *loaded);
    return std::make_unique<policy::LmPolicy>(std::move(s));
  }
  if (e.policy.kind == experiment::PolicyKind::openai)
    return policy::make_openai_policy({e.policy, candidate_language(e), seed});
  if (e.policy.kind == experiment::PolicyKind::replay)
    return std::make_unique<policy::ReplayPolicy>(e.policy.replay_dir, candidate_language(e));
  policy::SearchPolicyOptions o;
  o.learning_rate = e.policy.learning_rate;
  o.temperature = e.policy.temperature;
  o.language = candidate_language(e);
  return std::make_unique<policy::SearchPolicy>(seed, o);
}

std::optional<eval::Device> policy_lease(const experiment::Experiment& e) {
  if (e.policy.kind != experiment::PolicyKind::libtorch) return std::nullopt;
  const auto& d = e.eval.devices;
  if (std::find(d.begin(), d.end(), e.policy.lm.device) == d.end()) return std::nullopt;
  return e.policy.lm.device;
}

// The policy a seed starts from: the last committed snapshot of a resumed run, else the checkpoint, else fresh.
std::string starting_snapshot(const experiment::Experiment& e, const run::RunDirectory& dir) {
  if (auto last = dir.last_policy_snapshot()) return *last;
  if (!e.policy.checkpoint.empty()) return config::read_text_file(e.policy.checkpoint);
  return {};
}

std::shared_ptr<run::RunDirectory> open_seed_directory(const fs::path& seed_dir, const experiment::Experiment& e) {
  const bool started = fs::exists(seed_dir / "journal.jsonl") || fs::exists(seed_dir / "experiment.toml");
  return std::make_shared<run::RunDirectory>(started ? run::RunDirectory::resume(seed_dir)
                                                     : run::RunDirectory::create(seed_dir, e.text));
}

// What a seed's actors share: its tasks by name and the devices' leases.
struct SeedContext {
  const RunRequest& request;
  uint64_t seed = 0;
  fs::path seed_dir;
  std::map<std::string, eval::TaskSpec> tasks;
  std::shared_ptr<devices::DeviceLeases> leases = std::make_shared<devices::DeviceLeases>();
};

// The generator's and the optimizer's copies of the policy, both from the seed's starting snapshot (a language model's
// weights loaded once, read by both). The search and
// replay policies take microseconds of one core per step: no lease, so they never wait for a timing. A model sharing
// an evaluator's device holds that device's lease while it samples or trains, so no candidate is timed next to it.
std::pair<std::shared_ptr<actors::GeneratorSetup>, std::shared_ptr<actors::OptimizerSetup>> make_policies(
    const SeedContext& c, const run::RunDirectory& dir) {
  const auto& e = c.request.experiment;
  const std::string snapshot = starting_snapshot(e, dir);
  auto generator = std::make_shared<actors::GeneratorSetup>();
  auto optimizer = std::make_shared<actors::OptimizerSetup>();
  generator->policy = make_policy(e, c.seed, c.seed_dir);
  optimizer->policy = make_policy(e, c.seed, c.seed_dir, generator->policy.get());  // one copy of a model's weights
  generator->tasks = c.tasks;
  generator->policy_device = optimizer->policy_device = policy_lease(e);
  generator->leases = optimizer->leases = c.leases;
  if (!snapshot.empty()) {
    generator->policy->restore(snapshot);
    optimizer->policy->restore(snapshot);
  }
  // After restoring: a checkpoint may know fewer tasks than this experiment has.
  for (const auto& [name, task] : c.tasks) optimizer->policy->prepare(task);
  return {generator, optimizer};
}

actors::NormalizerSetup normalizer_setup(const experiment::Experiment& e,
                                         const std::map<std::string, eval::TaskSpec>& tasks) {
  actors::NormalizerSetup setup{e.reward, e.advantage, e.task_baseline, e.multi_turn};
  if (e.judge.enabled) {
    setup.judge = policy::make_llm_judge(e.judge);
    setup.judge_weight = e.judge.weight;
    setup.judge_when_correct_below = e.judge.when_correct_below;
    setup.judge_concurrency = e.judge.endpoint.concurrency;
    setup.tasks = tasks;
  }
  return setup;
}

actors::CoordinatorSetup coordinator_setup(const SeedContext& c, std::vector<modes::UnitPlan> units,
                                           std::set<std::string> committed) {
  const auto& e = c.request.experiment;
  actors::CoordinatorSetup setup;
  setup.mode = experiment::run_mode_name(e.mode);
  setup.units = std::move(units);
  if (e.search.kind == experiment::SearchKind::puct) {
    setup.puct = search::PuctOptions{e.search.c};
    if (!committed.empty()) setup.archived = archived_states(c.seed_dir);  // a resume keeps what was searched
  }
  setup.live = c.request.live;
  setup.seed = c.seed;
  setup.seed_index = static_cast<std::size_t>(std::find(e.seeds.begin(), e.seeds.end(), c.seed) - e.seeds.begin());
  setup.seeds = e.seeds.size();
  setup.progress_lines = !c.request.quiet;
  if (e.policy.kind == experiment::PolicyKind::libtorch && e.policy.lm.loss == experiment::Loss::sdpo)
    setup.teacher_feedback = e.policy.lm.sdpo_feedback;
  setup.committed = std::move(committed);
  if (!e.eval.devices.empty()) setup.compile_device = e.eval.devices.front();
  setup.compile_locally = !e.eval.devices.empty();
  setup.backend = e.eval.backend;
  setup.kind = e.eval.kind;
  return setup;
}

// What the stage accounting (tools/bench_stages) needs to know about this node.
struct NodeShape {
  int compile_workers = 0, cores = 1;
  std::size_t evaluators = 0;
};

void write_node_record(const fs::path& seed_dir, const NodeShape& n) {
  std::ofstream(seed_dir / "node.json") << "{\"compile_workers\": " << n.compile_workers << ", \"evaluators\": "
                                        << n.evaluators << ", \"cores\": " << n.cores << "}\n";
}

// An evaluator for the GPU a language model policy also computes on, and what each hands the other with the device:
// the evaluator's arena and input pools (KernelBench-size tasks keep tens of GB) go before the policy samples or
// trains, the policy's cached memory before a candidate is evaluated (its worker is another process).
// LibTorch empties its cache on every GPU at once: the other GPUs' leases are taken first, so that no candidate or
// reference is being timed there meanwhile.
std::shared_ptr<eval::Evaluator> share_with_policy(devices::DeviceLeases& leases, const eval::Device& device,
                                                  const std::vector<eval::Device>& other_gpus,
                                                  const eval::EvaluatorConfig& config) {
  auto evaluator = std::make_shared<eval::Evaluator>(config);
  auto guarded = [device](const char* what, const std::function<void()>& release) {
    try {
      release();
    } catch (const std::exception& error) {  // the next stage may then run short of memory, and says so itself
      log::Logger{"node"}.warn(device.name(), ": giving back ", what, " failed: ", error.what());
    }
  };
  leases.on_handover(device, devices::Party::policy, [evaluator, device, guarded] {
    guarded("the evaluator's memory", [&] { evaluator->release_device_memory(device); });
  });
  leases.on_handover(device, devices::Party::evaluator, [&leases, device, other_gpus, guarded] {
    guarded("the policy's cached memory", [&] {
      std::vector<devices::DeviceLeases::Lease> others;
      for (const auto& gpu : other_gpus) others.push_back(leases.acquire(gpu, devices::Party::evaluator));
      policy::release_cached_device_memory(device);
    });
  });
  return evaluator;
}

// The compile workers and one evaluator per device of this node.
NodeShape spawn_evaluation(caf::actor_system& system, const SeedContext& c, actors::coordinator_actor coordinator) {
  const auto& e = c.request.experiment;
  eval::EvaluatorConfig front_config;
  front_config.warm_workers = 0;
  front_config.gpu_warm_workers = 0;
  auto front = std::make_shared<eval::Evaluator>(front_config);
  // One compiler per core, less the cores CPU evaluators time candidates on: a compile sharing a core with a
  // timed call would slow it down and corrupt its reward.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int cpu_evaluators = e.eval.backend == eval::Backend::cpu ? static_cast<int>(e.eval.devices.size()) : 0;
  const int compile_workers = e.eval.devices.empty()        ? 0
                              : e.eval.compile_workers > 0 ? e.eval.compile_workers
                                                           : std::max(1, cores - cpu_evaluators);
  const eval::RunEvalSettings& settings = e.eval;
  for (int i = 0; i < compile_workers; ++i)
    system.spawn<caf::detached>(actors::compile_worker, coordinator, front,
                                eval::options_for(settings, e.eval.devices.front()), i);
  std::shared_ptr<eval::Evaluator> beside_policy;  // one for the policy's GPU, however many evaluators it has
  for (const auto& device : e.eval.devices) {
    auto s = std::make_shared<actors::EvaluatorSetup>();
    s->options = eval::options_for(settings, device);
    s->tasks = c.tasks;
    s->leases = c.leases;
    if (policy_lease(e) == device && device.is_cuda()) {  // a CPU keeps no memory between the two
      if (!beside_policy) {
        std::set<eval::Device> other_gpus;
        for (const auto& d : e.eval.devices)
          if (d.is_cuda() && !(d == device)) other_gpus.insert(d);
        beside_policy = share_with_policy(*c.leases, device, {other_gpus.begin(), other_gpus.end()}, s->config);
      }
      s->shared = beside_policy;
    }
    system.spawn<caf::detached>(actors::evaluator, coordinator, s);
  }
  return {compile_workers, cores, e.eval.devices.size()};
}

// The run of this seed, from the coordinator's start to its outcome; then the nodes hear that it is over before the
// connection closes (a node that misses it finds the port closed and waits for the next seed, or gives up).
RunResult await_outcome(caf::actor_system& system, actors::coordinator_actor coordinator,
                        const std::optional<actors::gateway_actor>& gateway) {
  RunResult result;
  caf::scoped_actor self{system};
  self->request(coordinator, caf::infinite, actors::run_atom_v)
      .receive([&](messages::RunOutcome& outcome) { result.ok = outcome.ok, result.message = outcome.message; },
               [&](caf::error& err) { result.message = "the coordinator failed: " + system.render(err); });
  if (gateway) {
    self->request(*gateway, std::chrono::seconds(2), actors::over_atom_v).receive([](caf::ok_atom) {}, [](caf::error&) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    self->send_exit(*gateway, caf::exit_reason::user_shutdown);
  }
  return result;
}

// One actor system per seed: telemetry, the reward normalizer, the optimizer and the generator, the coordinator
// that drives them, this node's evaluation, and (with [cluster]) the gateway for evaluator nodes.
RunResult run_seed(const RunRequest& request, uint64_t seed, bool last_seed, const std::vector<eval::TaskSpec>& tasks) {
  const auto& e = request.experiment;
  SeedContext c{request, seed, request.dir / ("seed-" + std::to_string(seed))};
  auto dir = open_seed_directory(c.seed_dir, e);
  std::vector<std::string> names;
  for (const auto& t : tasks) names.push_back(t.name), c.tasks[t.name] = t;
  auto units = modes::plan_units(e, names);
  std::set<std::string> committed(dir->committed().begin(), dir->committed().end());
  log::Logger{"node"}.info("seed ", seed, ": ", units.size(), " units, ", committed.size(), " committed before");
  auto [generator_setup, optimizer_setup] = make_policies(c, *dir);

  caf::actor_system_config config;
  configure_actor_system(config, 1);
  if (e.cluster.enabled())
    node::enable_network(config, {{e.cluster.tls_certificate, e.cluster.tls_key, e.cluster.tls_ca},
                                     e.cluster.heartbeat_s, 3 * e.cluster.node_timeout_s});
  caf::actor_system system{config};
  auto telemetry = system.spawn(actors::telemetry, dir, request.quiet);
  // A judge waits on HTTP: then the normalizer gets a thread of its own.
  const auto scoring = normalizer_setup(e, c.tasks);
  auto normalizer = e.judge.enabled ? system.spawn<caf::detached>(actors::reward_normalizer, scoring)
                                    : system.spawn(actors::reward_normalizer, scoring);
  auto optimizer = system.spawn<caf::detached>(actors::optimizer, optimizer_setup);
  auto generator = system.spawn<caf::detached>(actors::rollout_generator, generator_setup);
  auto setup = coordinator_setup(c, std::move(units), std::move(committed));
  setup.generator = generator, setup.normalizer = normalizer, setup.optimizer = optimizer, setup.telemetry = telemetry;
  auto coordinator = actors::spawn_coordinator(system, std::move(setup));
  const auto shape = spawn_evaluation(system, c, coordinator);

  std::optional<actors::gateway_actor> gateway;
  if (e.cluster.enabled()) {
    try {
      gateway = open_gateway(system, e, coordinator, seed, last_seed, tasks, request.dir / "logs");
    } catch (const std::exception& error) {
      caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
      return {false, error.what(), request.dir};
    }
  }
  write_node_record(c.seed_dir, shape);
  auto result = await_outcome(system, coordinator, gateway);
  result.dir = request.dir;
  for (const caf::actor& a : {caf::actor_cast<caf::actor>(telemetry), caf::actor_cast<caf::actor>(normalizer),
                              caf::actor_cast<caf::actor>(optimizer), caf::actor_cast<caf::actor>(generator)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return result;
}

}  // namespace

std::vector<eval::TaskSpec> check_runnable(const experiment::Experiment& e) {
  if (e.monitor.enabled() && !monitor::is_loopback(e.monitor.host)) {
    const char* token = std::getenv(e.monitor.token_env.c_str());
    if (!token || !*token)
      e.fail("monitor.listen", "\"" + e.monitor.listen + "\" is not loopback: set the token in $" + e.monitor.token_env);
  }
  experiment::check_machine_limits(e, std::thread::hardware_concurrency());
  auto tasks = experiment::resolve_tasks(e);
  const eval::Backend backend = e.eval.backend;
  const std::string size_set = e.eval.size_set();
  for (const auto& t : tasks)
    if (!t.sizes.count(size_set)) {
      std::string declared;
      for (const auto& [name, sizes] : t.sizes) declared += (declared.empty() ? "" : ", ") + name;
      e.fail(e.eval.sizes.empty() ? "eval.backend" : "eval.sizes",
             "task '" + t.name + "' declares no '" + size_set + "' sizes (it has: " + declared + ")");
    }
  if (e.cluster.enabled()) {
    try {
      cluster::read_secret_file(e.cluster.secret_file);
    } catch (const std::invalid_argument& error) {
      e.fail("cluster.secret_file", error.what());
    }
    for (const auto& [key, file] : {std::pair{"cluster.tls_certificate", e.cluster.tls_certificate},
                                    std::pair{"cluster.tls_key", e.cluster.tls_key}, std::pair{"cluster.tls_ca", e.cluster.tls_ca}})
      if (!file.empty() && !fs::is_regular_file(file)) e.fail(key, "no such file: " + file);
  }
  if (backend == eval::Backend::cuda) {
    const int available = eval::cuda_devices();
    for (const auto& d : e.eval.devices)
      if (d.index >= available)
        e.fail("eval.devices", "device " + d.name() + " is not usable here (" + std::to_string(available) + " GPUs)");
  }
  if (!e.policy.checkpoint.empty() && !fs::exists(e.policy.checkpoint))
    e.fail("policy.checkpoint", "no such file: " + e.policy.checkpoint);
  if (e.policy.kind == experiment::PolicyKind::replay) {
    if (!fs::is_directory(e.policy.replay_dir)) e.fail("policy.replay_dir", "not a directory: " + e.policy.replay_dir);
    policy::ReplayPolicy replay(e.policy.replay_dir, candidate_language(e));
    for (const auto& t : tasks)
      if (replay.files_for(t.name).empty())
        e.fail("policy.replay_dir", "no candidates for task '" + t.name + "' in " + e.policy.replay_dir + "/" + t.name);
    return tasks;
  }
  experiment::check_prompts(e, tasks);
  if (e.policy.kind == experiment::PolicyKind::libtorch) {
    if (auto problem = policy::lm_policy_problem(e.policy.lm, eval::cuda_devices()))
      e.fail("policy." + problem->first, problem->second);
    return tasks;
  }
  if (e.policy.kind == experiment::PolicyKind::openai) {
    const auto& o = e.policy.openai;
    if (!o.api_key_env.empty() && !std::getenv(o.api_key_env.c_str()))
      e.fail("policy.api_key_env", "the environment variable " + o.api_key_env + " is not set");
    if (!o.api_key_file.empty() && !fs::exists(o.api_key_file))
      e.fail("policy.api_key_file", "no such file: " + o.api_key_file);
    return tasks;  // the server is asked when sampling: one that is down gives recorded policy errors
  }
  for (const auto& t : tasks)
    if (!policy::template_for(t, candidate_language(e)))
      e.fail("tasks.names", "the search policy has no " + e.eval.language() + " template for task '" + t.name + "'");
  return tasks;
}

fs::path default_run_dir(const experiment::Experiment& e) {
  experiment::check_run_root(e);
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return fs::path(e.run_root) / (e.name + "-" + stamp);
}

std::shared_ptr<run::RunLock> lock_run_directory(const RunRequest& request) {
  // Before the lock, which would create the directory: a mistyped --resume leaves nothing behind.
  if (request.resume && !fs::exists(request.dir / "experiment.toml"))
    throw std::invalid_argument(request.dir.string() + " holds no run to resume (no experiment.toml)");
  auto lock = std::make_shared<run::RunLock>(run::RunLock::take(request.dir));
  if (!request.resume && fs::exists(request.dir / "experiment.toml"))
    throw std::invalid_argument(request.dir.string() + " already holds a run; use --resume to continue it");
  return lock;
}

RunResult run_experiment(const RunRequest& request) {
  const auto& e = request.experiment;
  const auto tasks = check_runnable(e);
  const auto lock = request.lock ? request.lock : lock_run_directory(request);
  if (!request.resume) std::ofstream(request.dir / "experiment.toml") << e.text;
  // Each start: what readers of the run need of its tasks, so they need not find the tasks directory again.
  run::write_task_record(request.dir, tasks);
  run::record_start(request.dir, request.resume);
  log::Options log_options;
  log_options.console_level = request.console_level;
  log_options.directory = (request.dir / "logs").string();
  log::init(log_options);
  RunResult result{true, "", request.dir};
  // The live view, for as long as the run goes on.
  RunRequest with_live = request;
  std::unique_ptr<monitor::MonitorServer> server;
  if (e.monitor.enabled()) {
    with_live.live = std::make_shared<monitor::LiveStatus>();
    const char* token = std::getenv(e.monitor.token_env.c_str());
    server = std::make_unique<monitor::MonitorServer>(
        monitor::MonitorOptions{e.monitor.host, e.monitor.port, token ? token : "", request.dir}, with_live.live);
    with_live.live->update([&](monitor::LiveSnapshot& s) {
      s.experiment = e.name;
      s.mode = experiment::run_mode_name(e.mode);
      s.seeds = e.seeds.size();
      s.started_at = actors::wall_now();
    });
    std::cout << "monitor: " << server->url()
              << (token && *token ? " (every request needs ?token= from $" + e.monitor.token_env + ")" : std::string())
              << std::endl;
  }
  for (std::size_t i = 0; i < e.seeds.size(); ++i) {
    if (with_live.live)
      with_live.live->update([&](monitor::LiveSnapshot& s) {
        s.seed = e.seeds[i];
        s.seed_index = i;
        s.seed_started_at = actors::wall_now();
        s.units_committed = s.units_committed_at_start = 0;
      });
    auto r = run_seed(with_live, e.seeds[i], i + 1 == e.seeds.size(), tasks);
    if (!r.ok) return r;
    result.message = r.message;
  }
  if (with_live.live) with_live.live->update([](monitor::LiveSnapshot& s) { s.finished = true; });
  result.summary = modes::write_run_summary(request.dir, e);
  log::flush();
  return result;
}

}  // namespace crucible::node

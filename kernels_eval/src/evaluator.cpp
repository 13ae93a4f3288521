#include "crucible/eval/evaluator.h"

#include <malloc.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>

#include "crucible/eval/static_gate.h"
#include "stages.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
std::string mode_name(Mode m) { return m == Mode::full ? "full" : "fast"; }

}  // namespace

fs::path default_include_dir() {
  if (const char* env = std::getenv("CRUCIBLE_INCLUDE_DIR")) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / "include" / "crucible" / "kernel.h")) return self.parent_path() / "include";
#ifdef CRUCIBLE_INCLUDE_DEFAULT_DIR
  return CRUCIBLE_INCLUDE_DEFAULT_DIR;
#else
  return "include";
#endif
}

std::vector<std::string> known_references() { return reference_names(); }

namespace {
EvaluatorConfig resolved(EvaluatorConfig c) {
  if (c.include_dir.empty()) c.include_dir = default_include_dir();
  if (c.worker_binary.empty()) c.worker_binary = default_worker_binary();
  return c;
}
}  // namespace

struct Evaluator::Cache {
  std::map<std::string, std::unique_ptr<InputPool>> pools;
  std::map<std::string, TimingStats> reference_times;

  const InputPool& pool(const TaskSpec& task, const std::string& backend, const Sizes& sizes) {
    constexpr uint64_t kPoolSeed = 0x5eed5eed;
    std::string key = task.name + "|" + task.source_path + "|" + backend;
    auto& slot = pools[key];
    if (!slot) slot = std::make_unique<InputPool>(task, sizes, kPoolSeed);
    return *slot;
  }
};

Evaluator::Evaluator(EvaluatorConfig config)
    : config_(resolved(std::move(config))),
      compiler_(config_.cache_dir, config_.include_dir),
      pool_(config_.worker_binary, config_.warm_workers),
      cache_(std::make_unique<Cache>()) {
  torch::set_num_threads(config_.threads);
  // Non-dumpable: a worker (which runs without capabilities) cannot open this process's /proc/<pid>/mem,
  // where the references live.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Tensors of a few MB come and go for every trial. glibc would map and unmap each one, and every first
  // touch of a fresh page faults (expensive in a VM); keeping freed blocks in the heap makes the evaluator's
  // own work, and the reference's output allocations inside timed calls, cost what they cost in steady state.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

Evaluator::~Evaluator() = default;

Verdict Evaluator::evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options) {
  const auto start = Clock::now();
  const bool full = options.mode == Mode::full;
  const int sets = std::max(1, std::min(options.input_sets, 8));

  Verdict v;
  v.task = task.name;
  v.device = options.device;
  v.mode = mode_name(options.mode);
  v.threads = config_.threads;
  auto finish = [&]() -> Verdict {
    v.stages.total_s = since(start);
    v.stages.overhead_s = std::max(0.0, v.stages.total_s - v.stages.compile_s - v.stages.kernel_s);
    return v;
  };

  const std::string backend = options.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  if (backend != "cpu") throw std::invalid_argument("device '" + options.device + "' is not supported by this build");
  ReferenceFn reference = find_reference(task.reference);
  if (!reference) throw TaskError("task '" + task.name + "': unknown reference '" + task.reference + "'");
  const Sizes& sizes = task.sizes_for(backend);
  std::vector<TensorShape> in_shapes, out_shapes;
  for (const auto& t : task.inputs) in_shapes.push_back({t.dtype, resolve_shape(t, sizes)});
  for (const auto& t : task.outputs) out_shapes.push_back({t.dtype, resolve_shape(t, sizes)});

  // 1. Compile.
  CompileOptions copts = options.compile;
  copts.backend = backend;
  CompileResult compiled = compiler_.compile(source, copts);
  v.compile = {compiled.cached, compiled.seconds, compiled.hash, compiled.log};
  v.stages.compile_s = compiled.seconds;
  switch (compiled.outcome) {
    case CompileResult::Outcome::ok: break;
    case CompileResult::Outcome::source_too_large:
      v.status = Status::rejected;
      v.reasons.push_back({"source_too_large", compiled.log});
      return finish();
    case CompileResult::Outcome::timed_out:
      v.status = Status::compile_error;
      v.reasons.push_back({"compile_timeout", "compile time limit exceeded"});
      return finish();
    case CompileResult::Outcome::failed:
      v.status = Status::compile_error;
      v.reasons.push_back({"compiler_error", "the compiler reported errors (see compile log)"});
      return finish();
  }

  // 2. Static gate.
  auto gate_start = Clock::now();
  GatePolicy policy{backend, task.allow_imports, copts.max_binary_bytes};
  auto refusals = check_shared_object(compiled.so_path, policy);
  v.stages.gate_s = since(gate_start);
  if (!refusals.empty()) {
    v.status = Status::rejected;
    v.reasons = std::move(refusals);
    return finish();
  }

  v.seed = options.seed ? *options.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();

  // 3. Load into a sandboxed worker.
  auto load_start = Clock::now();
  ArenaLayout layout = plan_arena(in_shapes, out_shapes, sets);
  auto worker = pool_.acquire();
  arena_.reserve(layout.bytes);
  // Whatever an earlier candidate left in the outputs is overwritten before anyone can read it.
  for (const auto& set : layout.outputs)
    for (const auto& slot : set) poison(arena_.data(), slot, 0);
  CallOutcome loaded = worker->load(compiled.so_path, layout, arena_, options.limits, options.call_timeout_s);
  v.stages.load_s = since(load_start);
  if (classify_failure(loaded, v)) return finish();

  StageContext ctx{task, reference, cache_->pool(task, backend, sizes), layout, *worker, out_shapes};
  ctx.seed = v.seed;
  ctx.full = full;
  // At least two trials: a verdict needs one, and the fixed-answer check needs a second.
  ctx.trials = std::max(2, options.correctness_trials >= 0 ? options.correctness_trials : (full ? 5 : 2));
  ctx.timed = options.timing_trials >= 0 ? options.timing_trials : (full ? 50 : 5);
  ctx.warmup = options.warmup_calls >= 0 ? options.warmup_calls : (full ? 3 : 1);
  ctx.verified = std::min(ctx.timed, options.verified_timed_calls >= 0 ? options.verified_timed_calls
                                                                       : (full ? ctx.timed : 0));
  ctx.timeout_s = options.call_timeout_s;

  // 4. Correctness.
  auto correctness_start = Clock::now();
  bool go_on = check_correctness(ctx, v);
  v.stages.correctness_s = since(correctness_start);

  // 5. Timing.
  if (go_on) {
    auto timing_start = Clock::now();
    const std::string key = task.name + "|" + task.source_path + "|" + backend + "|" + std::to_string(ctx.timed) +
                            "|" + std::to_string(sets) + "|" + std::to_string(config_.threads);
    measure_timing(ctx, v, cache_->reference_times, key);
    v.stages.timing_s = since(timing_start);
    if (v.status == Status::correct && v.candidate_time && v.reference_time && v.candidate_time->median_us > 0)
      v.speedup = v.reference_time->median_us / v.candidate_time->median_us;
    if (!task.flops.empty() && v.candidate_time && v.candidate_time->median_us > 0)
      v.gflops = evaluate_product(task.flops, sizes) / (v.candidate_time->median_us * 1e-6) / 1e9;
  }
  v.stages.kernel_s = ctx.kernel_s;
  return finish();
}

}  // namespace crucible::eval

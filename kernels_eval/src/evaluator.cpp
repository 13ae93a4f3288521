#include "crucible/eval/evaluator.h"

#include <algorithm>
#include <malloc.h>

#include <chrono>
#include <numeric>
#include <cstdlib>
#include <random>

#include "crucible/eval/static_gate.h"
#include "references.h"
#include "tensor_checks.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Maps how a worker call ended onto a verdict; false when the call succeeded.
bool classify_failure(const CallOutcome& out, Verdict& v) {
  using K = CallOutcome::Kind;
  switch (out.kind) {
    case K::ok: return false;
    case K::candidate_error:
      v.status = Status::runtime_error;
      v.reasons.push_back({out.rc != 0 ? "nonzero_return" : "load_failed", out.detail});
      return true;
    case K::crashed:
      v.status = Status::runtime_error;
      v.reasons.push_back({"crash", out.detail});
      return true;
    case K::forbidden_syscall:
      v.status = Status::rejected;
      v.reasons.push_back({"forbidden_syscall", out.detail});
      return true;
    case K::timed_out:
      v.status = Status::timeout;
      v.reasons.push_back({"wall_timeout", out.detail});
      return true;
    case K::cpu_limit:
      v.status = Status::timeout;
      v.reasons.push_back({"cpu_time_limit", out.detail});
      return true;
    case K::worker_lost:
      v.status = Status::runtime_error;
      v.reasons.push_back({"worker_lost", out.detail});
      return true;
  }
  return true;
}

std::string mode_name(Mode m) { return m == Mode::full ? "full" : "fast"; }

// The largest input: rotating it before each timed call is enough to defeat any output cache.
std::size_t largest_input(const std::vector<ArenaTensor>& inputs) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i].bytes > inputs[best].bytes) best = i;
  return best;
}

void check_task_outputs(const TaskSpec& task, const std::vector<torch::Tensor>& refs,
                        const std::vector<TensorShape>& declared) {
  if (refs.size() != declared.size())
    throw TaskError("task '" + task.name + "': reference returns " + std::to_string(refs.size()) +
                    " outputs but the task declares " + std::to_string(declared.size()));
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].sizes().vec() != declared[i].shape || refs[i].scalar_type() != to_torch(declared[i].dtype))
      throw TaskError("task '" + task.name + "': reference output " + task.outputs[i].name +
                      " does not match its declared shape and dtype");
  }
}

// The constant-output hack: if zeros would pass, the check proves nothing.
void check_not_degenerate(const TaskSpec& task, const std::vector<torch::Tensor>& refs) {
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (!refs[i].is_floating_point()) continue;
    auto tol = task.tolerance_for(task.outputs[i].dtype);
    if (max_abs(refs[i]) * (1.0 - tol.rtol) <= tol.atol)
      throw TaskError("task '" + task.name + "' is degenerate: an all-zero " + task.outputs[i].name +
                      " passes its tolerance; draw inputs that move the output away from zero");
  }
}

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
  const int trials = options.correctness_trials >= 0 ? options.correctness_trials : (full ? 5 : 2);
  const int timed = options.timing_trials >= 0 ? options.timing_trials : (full ? 50 : 5);
  const int warmup = options.warmup_calls >= 0 ? options.warmup_calls : (full ? 3 : 1);
  const int sets = std::max(1, std::min(options.input_sets, 8));
  const double timeout = options.call_timeout_s;

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

  const InputPool& input_pool = cache_->pool(task, backend, sizes);
  v.seed = options.seed ? *options.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  auto draw = [&](uint64_t stream) { return input_pool.draw(v.seed * 0x100000001b3ULL + stream); };

  // 3. Load into a sandboxed worker.
  auto load_start = Clock::now();
  ArenaLayout layout = plan_arena(in_shapes, out_shapes, sets);
  auto worker = pool_.acquire();
  arena_.reserve(layout.bytes);
  // Whatever an earlier candidate left in the outputs is overwritten before anyone can read it.
  for (const auto& set : layout.outputs)
    for (const auto& slot : set) poison(arena_.data(), slot, 0);
  CallOutcome loaded = worker->load(compiled.so_path, layout, arena_, options.limits, timeout);
  v.stages.load_s = since(load_start);
  if (classify_failure(loaded, v)) return finish();
  std::byte* arena = worker->arena();
  double kernel_s = 0.0;

  // 4. Correctness: fresh inputs per trial in the same buffers; each input set run twice with
  //    different poison; inputs must come back unchanged.
  auto correctness_start = Clock::now();
  std::vector<torch::Tensor> first_refs;
  bool all_passed = true;
  bool fixed_answer_passes = trials >= 2;
  for (int trial = 0; trial < trials; ++trial) {
    auto inputs = draw(static_cast<uint64_t>(trial));
    auto ref_start = Clock::now();
    auto refs = reference(inputs, task.params);
    kernel_s += since(ref_start);
    check_task_outputs(task, refs, out_shapes);
    if (trial == 0) {
      check_not_degenerate(task, refs);  // later trials are covered by the fixed-answer check
      for (auto& r : refs) first_refs.push_back(r.clone());
    } else {
      for (std::size_t i = 0; i < refs.size(); ++i)
        if (!compare(first_refs[i], refs[i], task.tolerance_for(task.outputs[i].dtype)).passed)
          fixed_answer_passes = false;
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) write_tensor(arena, layout.inputs[0][i], inputs[i]);

    TrialReport report;
    report.trial = trial;
    std::vector<torch::Tensor> first_run;  // kept, when the first call failed, to compare the two calls
    // The first trial calls twice on the same inputs (state left by a call shows as disagreement);
    // later trials call once, on fresh inputs in the same buffers.
    const int runs = trial == 0 ? 2 : 1;
    bool run_passed[2] = {true, true};
    bool mutated = false;
    int64_t unwritten = 0, nan_mismatched = 0;
    for (int run = 0; run < runs; ++run) {
      for (const auto& slot : layout.outputs[0]) poison(arena, slot, run);
      CallOutcome out = worker->call(0, timeout);
      kernel_s += out.seconds;
      if (classify_failure(out, v)) {
        v.stages.kernel_s = kernel_s;
        return finish();
      }
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (same_bytes(arena, layout.inputs[0][i], inputs[i])) continue;
        mutated = true;  // put the inputs back so the second call sees what the reference saw
        write_tensor(arena, layout.inputs[0][i], inputs[i]);
      }
      int64_t run_unwritten = 0;
      for (std::size_t i = 0; i < refs.size(); ++i) {
        const auto& slot = layout.outputs[0][i];
        auto output = view_tensor(arena, slot);
        Comparison c = compare(output, refs[i], task.tolerance_for(task.outputs[i].dtype));
        if (!c.passed) run_unwritten += count_poisoned(arena, slot, run);  // poison never passes
        run_passed[run] &= c.passed;
        report.max_abs_error = std::max(report.max_abs_error, c.max_abs);
        report.max_rel_error = std::max(report.max_rel_error, c.max_rel);
        report.mismatched = std::max(report.mismatched, c.mismatched);
        nan_mismatched = std::max(nan_mismatched, c.nan_mismatched);
        report.elements = c.elements;
      }
      unwritten = std::max(unwritten, run_unwritten);
      if (run == 0 && !run_passed[0])
        for (const auto& slot : layout.outputs[0]) first_run.push_back(view_tensor(arena, slot).clone());
    }
    // Same inputs, two calls: one right and one wrong means state survived between calls.
    bool disagree = runs == 2 && run_passed[0] != run_passed[1];
    if (runs == 2 && !run_passed[0] && !run_passed[1])
      for (std::size_t i = 0; i < refs.size(); ++i)
        disagree |= !compare(first_run[i], view_tensor(arena, layout.outputs[0][i]),
                             task.tolerance_for(task.outputs[i].dtype)).passed;
    bool passed = run_passed[0] && run_passed[1];
    passed &= !mutated;
    report.passed = passed;
    v.trials.push_back(report);
    if (passed) continue;
    all_passed = false;
    std::string where = "trial " + std::to_string(trial) + ": ";
    if (mutated) v.reasons.push_back({"input_mutated", where + "an input was modified by the candidate"});
    if (unwritten > 0)
      v.reasons.push_back({"output_unwritten", where + std::to_string(unwritten) + " output elements never written"});
    if (disagree)
      v.reasons.push_back({"nondeterministic", where + "the same inputs gave different outputs on two calls "
                                                       "(stale memory or state kept between calls)"});
    if (unwritten == 0 && nan_mismatched > 0)
      v.reasons.push_back({"nan", where + std::to_string(nan_mismatched) + " NaN outputs"});
    if (!mutated && unwritten == 0 && !disagree && nan_mismatched == 0)
      v.reasons.push_back({"mismatch", where + std::to_string(report.mismatched) + " of " +
                                           std::to_string(report.elements) + " elements outside tolerance"});
    break;  // one failing trial decides the verdict
  }
  v.stages.correctness_s = since(correctness_start);
  if (!all_passed) {
    v.status = Status::incorrect;
    v.stages.kernel_s = kernel_s;
    return finish();
  }
  if (fixed_answer_passes)
    throw TaskError("task '" + task.name + "' is degenerate: the first trial's answer passes every other trial; "
                    "vary the inputs (e.g. scale_low/scale_high) so a fixed output cannot pass");
  v.status = Status::correct;

  // 5. Timing: rotate among input sets, and give the largest input fresh contents (a new pool window)
  //    before every call, so no output cache keyed on pointers or contents can hit.
  auto timing_start = Clock::now();
  const std::size_t largest = largest_input(layout.inputs[0]);
  std::vector<std::vector<torch::Tensor>> current(sets);  // what each arena set holds now
  for (int s = 0; s < sets; ++s) {
    current[s] = draw(1000 + static_cast<uint64_t>(s));
    for (std::size_t i = 0; i < current[s].size(); ++i) write_tensor(arena, layout.inputs[s][i], current[s][i]);
  }
  uint64_t draw_stream = 2000;
  auto refresh_largest = [&](int s) {
    current[s][largest] = draw(draw_stream++)[largest];
    write_tensor(arena, layout.inputs[s][largest], current[s][largest]);
  };
  for (int w = 0; w < warmup; ++w)
    for (int s = 0; s < sets; ++s) {
      CallOutcome out = worker->call(s, timeout);
      kernel_s += out.seconds;
      if (classify_failure(out, v)) return finish();
    }
  // Timed calls are checked too, or a candidate could work only when checked: every timed call must write
  // all of its (poisoned) outputs, and randomly chosen ones are compared with the reference in full.
  // At least one verified call per input set, so a candidate that cheats on the sets correctness never
  // uses is caught every time; the rest are drawn at random.
  std::mt19937_64 pick(v.seed ^ 0x7f4a7c15u);
  std::vector<bool> verify(timed, false);
  for (int s = 0; s < sets && s < timed; ++s) {
    int calls_on_set = (timed - s + sets - 1) / sets;  // calls s, s + sets, ...
    verify[s + sets * static_cast<int>(pick() % calls_on_set)] = true;
  }
  int wanted = std::min(timed, options.verified_timed_calls >= 0 ? options.verified_timed_calls : (full ? timed : 0));
  std::vector<int> order(timed);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), pick);
  for (int k = 0; k < timed && std::count(verify.begin(), verify.end(), true) < wanted; ++k) verify[order[k]] = true;
  struct Snapshot {
    int call;
    std::vector<torch::Tensor> inputs, outputs;
  };
  std::vector<Snapshot> snapshots;
  std::vector<double> samples;
  for (int i = 0; i < timed; ++i) {
    int s = i % sets;
    refresh_largest(s);
    for (const auto& slot : layout.outputs[s]) poison(arena, slot, i % 2);
    // The sample runs until a sync returns: a candidate that reports completion early and works on is
    // still inside its call then, so the hidden work is counted instead of escaping into our pause.
    CallOutcome out = worker->call(s, timeout);
    if (out.ok()) {
      CallOutcome settled = worker->sync(timeout);
      out.seconds += settled.seconds;
      if (!settled.ok()) out = settled;
    }
    kernel_s += out.seconds;
    if (classify_failure(out, v)) {
      v.stages.kernel_s = kernel_s;
      return finish();
    }
    samples.push_back(out.seconds * 1e6);
    int64_t unwritten = 0;
    for (const auto& slot : layout.outputs[s]) unwritten += count_poisoned(arena, slot, i % 2);
    if (unwritten > 0 && v.status == Status::correct) {
      v.status = Status::incorrect;
      v.reasons.push_back({"skipped_work", "timed call " + std::to_string(i) + ": " + std::to_string(unwritten) +
                                               " output elements never written"});
    }
    if (verify[i]) {
      Snapshot snap{i, current[s], {}};
      for (const auto& slot : layout.outputs[s]) snap.outputs.push_back(view_tensor(arena, slot).clone());
      snapshots.push_back(std::move(snap));
    }
  }
  for (const auto& snap : snapshots) {
    auto ref_start = Clock::now();
    auto refs = reference(snap.inputs, task.params);
    kernel_s += since(ref_start);
    for (std::size_t k = 0; k < refs.size(); ++k) {
      Comparison c = compare(snap.outputs[k], refs[k], task.tolerance_for(task.outputs[k].dtype));
      if (!c.passed && v.status == Status::correct) {
        v.status = Status::incorrect;
        v.reasons.push_back({"skipped_work", "timed call " + std::to_string(snap.call) + ": " +
                                                 std::to_string(c.mismatched) + " of " + std::to_string(c.elements) +
                                                 " elements wrong (correct only when checked?)"});
      }
    }
  }
  v.candidate_time = summarize_times(samples);
  for (int s = 0; s < sets; ++s)
    for (std::size_t i = 0; i < current[s].size(); ++i)
      if (!same_bytes(arena, layout.inputs[s][i], current[s][i]) && v.status == Status::correct) {
        v.status = Status::incorrect;
        v.reasons.push_back({"input_mutated", "an input was modified during timing"});
      }

  const std::string key = task.name + "|" + task.source_path + "|" + backend + "|" + std::to_string(timed) + "|" +
                          std::to_string(sets) + "|" + std::to_string(config_.threads);
  auto cached = cache_->reference_times.find(key);
  if (cached != cache_->reference_times.end()) {
    v.reference_time = cached->second;
  } else if (timed > 0) {
    for (int w = 0; w < warmup; ++w)
      for (int s = 0; s < sets; ++s) reference(current[s], task.params);
    std::vector<double> ref_samples;
    for (int i = 0; i < timed; ++i) {
      int s = i % sets;
      current[s][largest] = draw(draw_stream++)[largest].clone();  // just written, as for the candidate
      auto t0 = Clock::now();
      auto out = reference(current[s], task.params);
      double seconds = since(t0);
      kernel_s += seconds;
      ref_samples.push_back(seconds * 1e6);
    }
    v.reference_time = cache_->reference_times[key] = summarize_times(ref_samples);
  }
  v.stages.timing_s = since(timing_start);
  if (v.candidate_time && v.reference_time && v.candidate_time->median_us > 0)
    v.speedup = v.reference_time->median_us / v.candidate_time->median_us;
  if (!task.flops.empty() && v.candidate_time && v.candidate_time->median_us > 0)
    v.gflops = evaluate_product(task.flops, sizes) / (v.candidate_time->median_us * 1e-6) / 1e9;
  v.stages.kernel_s = kernel_s;
  return finish();
}

}  // namespace crucible::eval

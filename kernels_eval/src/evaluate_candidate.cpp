// One candidate's evaluation, step by step: build (compile and gate), load into a sandboxed worker, correctness,
// timing. Each step adds to the verdict; one that decides it ends the evaluation.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>

#include "crucible/eval/static_gate.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"
#include "evaluator_impl.h"

namespace crucible::eval {

namespace {

// The harness's own CPU cost of a timed call (a call and its sync on trusted code), taken off CPU samples.
constexpr int kHostNullCalls = 9;

// Timed calls a GPU evaluation in full mode compares with the reference (at least one per input set): a reference
// call costs about what the candidate's does, so comparing all 50 would double the evaluation. Every timed call is
// still checked for unwritten outputs, and the compared ones are chosen after the calls.
constexpr int kGpuVerifiedTimedCalls = 4;
// A KernelBench answer may keep PyTorch's operators (a cuDNN convolution beside its own fused epilogue), so its own
// kernels' share of the GPU time is reported, and only a share this small is refused: a decoy kernel on a scrap
// while PyTorch computes the answer.
constexpr double kKernelBenchMinOwnShare = 0.05;

// Set while a candidate is evaluated again in a fresh worker (see Evaluator::Impl::evaluate).
thread_local bool t_fresh_worker = false;

uint64_t random_word() { return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}(); }

// How many input sets fit the GPU. Each set takes its tensors in the arena plus the evaluator's copy of its
// refreshed largest input; beside them live the input pools (2x each input plus a mask byte per element) and room
// for a reference's outputs, a kept output and scratch memory (three of the largest tensor).
int sets_that_fit(const cuda::DeviceInfo& info, const std::vector<TensorShape>& in, const std::vector<TensorShape>& out,
                  int wanted, bool pools_exist) {
  std::size_t largest = 0, largest_input = 0, pool = 0;
  for (const auto* group : {&in, &out})
    for (const auto& t : *group) {
      std::size_t b = static_cast<std::size_t>(numel(t.shape)) * dtype_size(t.dtype);
      largest = std::max(largest, b);
      if (group != &in) continue;
      largest_input = std::max(largest_input, b);
      if (!pools_exist) pool += pool_bytes(numel(t.shape), t.dtype);
    }
  const std::size_t per_set = bytes_of(in) + bytes_of(out) + largest_input;
  const double budget = static_cast<double>(info.free_bytes) - pool - 3.0 * largest - (1ull << 30);
  int fit = per_set > 0 ? static_cast<int>(budget / static_cast<double>(per_set)) : wanted;
  return std::max(1, std::min(wanted, fit));
}

// Whatever an earlier candidate left in the outputs is overwritten before anyone can read it.
void poison_outputs(const ArenaLayout& layout, ArenaRef arena) {
  for (const auto& set : layout.outputs)
    for (const auto& slot : set) {
      poison(arena, slot, 0);
      fill_guard(arena, slot);
    }
}

// What a native build's outcome makes of the verdict: true when it built.
bool accept_compile(const CompileResult& compiled, Verdict& v) {
  v.compile = {compiled.cached, compiled.seconds, compiled.hash, compiled.log};
  v.stages.compile_s = compiled.seconds;
  switch (compiled.outcome) {
    case CompileResult::Outcome::ok: return true;
    case CompileResult::Outcome::source_too_large:
      v.status = Status::rejected;
      v.reasons.push_back({ReasonCode::source_too_large, compiled.log});
      return false;
    case CompileResult::Outcome::timed_out:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compile_timeout, "compile time limit exceeded"});
      return false;
    case CompileResult::Outcome::failed:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compiler_error, "the compiler reported errors (see compile log)"});
      return false;
    case CompileResult::Outcome::environment_error:
      v.status = Status::compile_error;
      v.reasons.push_back(
          {ReasonCode::compile_environment, "not the candidate's fault, and not cached: " + compiled.log});
      return false;
  }
  return false;
}

// The throughput figures of a timed candidate: speedup, GFLOP/s where the task declares its flops, and GB/s of the
// least traffic any implementation needs (every input read once, every output written once).
void derive_rates(Evaluation& e) {
  Verdict& v = e.v;
  if (!v.candidate_time || v.candidate_time->median_us <= 0) return;
  const double seconds = v.candidate_time->median_us * 1e-6;
  if (v.status == Status::correct && !v.speedup && v.reference_time)
    v.speedup = v.reference_time->median_us / v.candidate_time->median_us;
  if (!e.task.flops.empty()) v.gflops = evaluate_product(e.task.flops, e.task.sizes_for(e.size_set)) / seconds / 1e9;
  v.gbps = static_cast<double>(bytes_of(e.in_shapes) + bytes_of(e.out_shapes)) / seconds / 1e9;
}

}  // namespace

Verdict verdict_header(const TaskSpec& task, const EvalOptions& options, int threads) {
  Verdict v;
  v.task = task.name;
  v.device = options.device;
  v.mode = options.mode;
  // Only a Triton worker holds its calls (see docs/cuda.md): a CPU or CUDA C++ candidate is timed as launched.
  const bool held = options.device.is_cuda() && options.kind == CandidateKind::triton;
  v.launches = held ? options.launches : Launches::eager;
  v.threads = threads;
  return v;
}

void clean_details(Verdict& v) {
  for (auto& r : v.reasons) r.detail = valid_utf8(r.detail);
}

Verdict Evaluator::Impl::finished(Evaluation& e) const {
  Verdict& v = e.v;
  v.stages.total_s = since(e.start);
  v.stages.overhead_s = std::max(0.0, v.stages.total_s - v.stages.compile_s - v.stages.kernel_s);
  clean_details(v);  // (the compile log already is valid: the compiler makes its excerpt so)
  return std::move(v);
}

Verdict Evaluator::Impl::evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options) {
  Evaluation e{task, source, options, Clock::now(), verdict_header(task, options, config.threads)};
  e.gpu = gpu_for(options.device);
  e.size_set = options.sizes.empty() ? std::string(backend_name(options.device.backend)) : options.sizes;
  if (const auto& cases = task.cases_for(e.size_set); !cases.empty())
    return evaluate_cases(task, cases, e.size_set, source, options);
  e.reference = reference_for(task, e.size_set,
                              e.gpu ? torch::Device(torch::kCUDA, e.cuda_device()) : torch::Device(torch::kCPU));
  auto shapes = shapes_at(task, e.size_set);
  e.in_shapes = std::move(shapes.inputs), e.out_shapes = std::move(shapes.outputs);

  // 1-2. Compile and gate.
  if (!build(e)) return finished(e);
  e.v.seed = options.seed ? *options.seed : random_word();
  // 3. Load into a sandboxed worker; 4-5. correctness and timing.
  if (!load(e)) return finished(e);
  check_and_time(e);
  if (e.gpu && !e.python_pool) {
    // A reused worker's candidate that is not found correct is evaluated again in a fresh worker, whose verdict
    // stands: nothing an earlier candidate left behind can cost a later one its verdict.
    if (e.worker->uses() > 1 && e.v.status != Status::correct && !t_fresh_worker) {
      e.worker.reset();
      struct FreshWorkers {
        FreshWorkers() { t_fresh_worker = true; }
        ~FreshWorkers() { t_fresh_worker = false; }
      } fresh;
      return evaluate(task, source, options);
    }
    e.gpu->workers->recycle(std::move(e.worker), e.v.status == Status::correct, options.call_timeout_s);
  }
  return finished(e);
}

// A Triton candidate is gated on its source, then compiled by Triton (see triton_candidate.h); a KernelBench one is
// gated on its source, then its load_inline extensions compiled and gated (kernelbench_candidate.h); a native one is
// compiled, then gated on its shared object.
bool Evaluator::Impl::build(Evaluation& e) {
  switch (e.options.kind) {
    case CandidateKind::triton: return build_triton(e);
    case CandidateKind::kernelbench: return build_kernelbench(e);
    case CandidateKind::native: break;
  }
  return build_native(e);
}

bool Evaluator::Impl::build_native(Evaluation& e) {
  const CompileOptions copts = compile_options(e.source, e.options, e.gpu ? &e.gpu->info : nullptr);
  const CompileResult compiled = compiler.compile(e.source, copts);
  if (!accept_compile(compiled, e.v)) return false;
  const auto gate_start = Clock::now();
  const GatePolicy policy{e.options.device.backend, e.task.allow_imports, copts.max_binary_bytes};
  auto refusals = check_shared_object(compiled.so_path, policy);
  e.v.stages.gate_s = since(gate_start);
  if (!refusals.empty()) {
    e.v.status = Status::rejected;
    e.v.reasons = std::move(refusals);
    return false;
  }
  e.candidate_path = compiled.so_path;
  return true;
}

bool Evaluator::Impl::load(Evaluation& e) {
  e.load_start = Clock::now();
  const int sets = std::max(1, std::min(e.options.input_sets, 8));
  e.arena_sets = sets;
  if (e.gpu) {
    cuda::DeviceInfo now = cuda::device_info(e.cuda_device());
    now.free_bytes += e.gpu->tensors.size();  // the arena is reused
    const bool pools_exist = cache.has_pool(e.task, e.options.device, e.size_set);
    // As many sets as the task had before its memory was given back (release_device_memory), where they still fit:
    // the sets are part of the reference timing's key.
    const std::string key = EvaluatorCache::pool_key(e.task, e.options.device, e.size_set);
    const auto before = cache.arena_sets.find(key);
    e.arena_sets = sets_that_fit(now, e.in_shapes, e.out_shapes, before != cache.arena_sets.end() ? before->second : sets,
                                 pools_exist);
    if (before == cache.arena_sets.end()) cache.arena_sets[key] = e.arena_sets;
  }
  e.layout = plan_arena(e.in_shapes, e.out_shapes, e.arena_sets);
  const CallOutcome loaded = e.gpu ? load_on_gpu(e) : load_on_cpu(e);
  e.v.stages.load_s = since(e.load_start);
  return !classify_failure(loaded, e.v);
}

CallOutcome Evaluator::Impl::load_on_cpu(Evaluation& e) {
  e.worker = e.python_pool ? e.python_pool->acquire() : pool.acquire();
  // Candidate and reference are timed in turns on one core (see share_cpu); a reference on several threads
  // needs the others.
  if (config.threads == 1) e.worker->share_cpu();
  arena.reserve(e.layout.bytes);
  poison_outputs(e.layout, ArenaRef{arena.data(), -1});
  return e.worker->load(e.candidate_path, e.layout, arena, e.options.limits, e.options.call_timeout_s, nullptr,
                        kHostNullCalls);
}

// The GPU's arena is device memory its worker maps; the worker's own null calls and launches, timed on trusted code,
// bound how fast a candidate's call can claim to be.
CallOutcome Evaluator::Impl::load_on_gpu(Evaluation& e) {
  const bool trace = trace_calls();
  GpuResources& gpu = *e.gpu;
  WorkerPool& workers = e.python_pool ? *e.python_pool : *gpu.workers;
  e.worker = t_fresh_worker ? workers.acquire_fresh() : workers.acquire();
  if (trace) std::fprintf(stderr, "load: worker acquired after %.1f ms\n", since(e.load_start) * 1e3);
  gpu.tensors.reserve(e.layout.bytes);
  e.gpu_stage = {e.cuda_device(), gpu.tensors.data(), gpu.flush.get(), 0.0};
  // KernelBench lets an answer keep some of PyTorch's operators (and its allocations fill memory): there the
  // profiler's share is reported, not enforced.
  e.gpu_stage.own_kernels_only = e.options.kind == CandidateKind::triton;
  if (e.options.kind == CandidateKind::kernelbench) e.gpu_stage.min_own_share = kKernelBenchMinOwnShare;
  // Held calls are trusted only where the candidate cannot reach its worker's control block: a CUDA C++ candidate
  // shares the worker's memory and could say it returned from launching while its work had run unheld.
  const bool queued = e.options.launches == Launches::queued && e.python_pool;
  if (queued && gpu.held->available()) e.gpu_stage.held = gpu.held.get();
  poison_outputs(e.layout, ArenaRef{e.gpu_stage.tensors, e.cuda_device()});
  cuda::synchronize();
  DeviceShare share;
  share.device = e.cuda_device();
  share.ipc_handle = gpu.tensors.ipc_handle();
  if (trace) std::fprintf(stderr, "load: arena ready after %.1f ms\n", since(e.load_start) * 1e3);
  share.bytes = gpu.tensors.size();
  share.null_calls = 20;
  share.queued_launches = queued;
  share.before_call = [flush = gpu.flush.get()] {
    flush->run();
    cuda::synchronize();
  };
  const bool reused = e.worker->uses() > 0;
  const auto& o = e.options;
  CallOutcome loaded = e.worker->load(e.candidate_path, e.layout, gpu.control, o.limits, o.call_timeout_s, &share);
  if (reused && !loaded.ok()) {  // whatever went wrong, the candidate gets the fresh worker it would have had
    e.worker = workers.acquire_fresh();
    loaded = e.worker->load(e.candidate_path, e.layout, gpu.control, o.limits, o.call_timeout_s, &share);
  }
  const auto& null_calls = e.worker->null_call_seconds();
  if (!null_calls.empty()) e.gpu_stage.null_call_s = summarize_times(null_calls).median_us;  // in seconds here
  const auto& null_launches = e.worker->null_launch_seconds();
  if (!null_launches.empty()) e.gpu_stage.null_launch_s = summarize_times(null_launches).median_us;
  if (trace)
    std::fprintf(stderr, "load: null call %.1f us, null launch %.1f us\n", e.gpu_stage.null_call_s * 1e6,
                 e.gpu_stage.null_launch_s * 1e6);
  return loaded;
}

// What the stages share: the task, its reference and input pool, the loaded worker, and the mode's trial counts.
StageContext Evaluator::Impl::stage_context(Evaluation& e) {
  const EvalOptions& o = e.options;
  const bool full = o.mode == EvalDepth::full;
  StageContext ctx{e.task, e.reference, cache.pool(e.task, o.device, e.size_set, e.task.sizes_for(e.size_set)),
                   e.layout, *e.worker, e.out_shapes};
  ctx.gpu = e.gpu ? &e.gpu_stage : nullptr;
  ctx.seed = e.v.seed;
  ctx.input_key = random_word();
  ctx.full = full;
  if (!e.gpu && !e.worker->null_call_cpu_seconds().empty())
    ctx.harness_cpu_s = summarize_times(e.worker->null_call_cpu_seconds()).median_us;  // in seconds here
  // At least two trials: a verdict needs one, and the fixed-answer check needs a second; a task whose outputs
  // concentrate needs more, whatever the mode.
  const int trials = o.correctness_trials >= 0 ? o.correctness_trials : (full ? 5 : 2);
  ctx.trials = std::max({2, e.task.min_correctness_trials, trials});
  ctx.timed = o.timing_trials >= 0 ? o.timing_trials : (full ? 50 : 5);
  ctx.warmup = o.warmup_calls >= 0 ? o.warmup_calls : (full ? 3 : 1);
  const int full_verified = e.gpu ? std::max(kGpuVerifiedTimedCalls, ctx.sets()) : ctx.timed;
  ctx.verified = std::min(ctx.timed, o.verified_timed_calls >= 0 ? o.verified_timed_calls : (full ? full_verified : 0));
  ctx.timeout_s = o.call_timeout_s;
  // The budget counts from the start of loading; compiling has its own limit.
  ctx.started = e.load_start;
  ctx.planned_calls = ctx.trials + 1 + 8 + ctx.warmup * ctx.sets() + (e.gpu ? 1 : 8) * ctx.timed;
  ctx.budget_derived = o.evaluation_budget_s <= 0.0;
  ctx.budget_s = ctx.budget_derived ? o.min_evaluation_budget_s : o.evaluation_budget_s;
  return ctx;
}

// 4. Correctness, then 5. timing, for a candidate that passed.
void Evaluator::Impl::check_and_time(Evaluation& e) {
  StageContext ctx = stage_context(e);
  Verdict& v = e.v;
  const auto correctness_start = Clock::now();
  const std::string task_key = EvaluatorCache::pool_key(e.task, e.options.device, e.size_set);
  ctx.task_sound = cache.sound_tasks.count(task_key) > 0;
  const bool go_on = check_correctness(ctx, v);
  if (ctx.task_sound) cache.sound_tasks.insert(task_key);
  v.stages.correctness_s = since(correctness_start);
  if (go_on) {
    const auto timing_start = Clock::now();
    const std::string key = timing_key(e, ctx);
    {
      // No spare worker makes its CUDA context while calls are timed (see WorkerPool::pause_starts).
      StartsPaused paused(e.gpu ? std::vector<WorkerPool*>{e.gpu->workers.get(), e.gpu->triton_workers.get(),
                                                            e.gpu->kernelbench_workers.get()}
                                : std::vector<WorkerPool*>{});
      // A CPU candidate is timed on this host's cores: this process's compiles wait meanwhile.
      std::optional<ChildrenPaused> compiles;
      if (!e.gpu) compiles.emplace();
      measure_timing(ctx, v, cache.timings, key);
    }
    v.stages.timing_s = since(timing_start);
    // A worker that could not hold its calls, or stopped (its candidate waited for the GPU while launching), was
    // timed as launched: the verdict says so.
    if (e.gpu && !e.worker->holding()) v.launches = Launches::eager;
    derive_rates(e);
  }
  v.stages.kernel_s = ctx.kernel_s;
}

}  // namespace crucible::eval

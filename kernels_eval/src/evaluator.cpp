#include "crucible/eval/evaluator.h"

#include <malloc.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <torch/version.h>

#include "crucible/eval/device.h"
#include "crucible/eval/shared_timing.h"
#include "crucible/eval/static_gate.h"
#include "crucible/eval/utf8_text.h"
#include "crucible/eval/worker_protocol.h"
#include "stages.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The harness's own CPU cost of a timed call (a call and its sync on trusted code), taken off CPU samples.
constexpr int kHostNullCalls = 9;

// Timed calls a GPU evaluation in full mode compares with the reference (at least one per input set): a reference
// call costs about what the candidate's does, so comparing all 50 would double the evaluation. Every timed call is
// still checked for unwritten outputs, and the compared ones are chosen after the calls.
constexpr int kGpuVerifiedTimedCalls = 4;

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

int cuda_devices() {
  if (!cuda::built_with_cuda() || !torch::cuda::is_available()) return 0;
  return cuda::device_count();
}

GpuDescription describe_gpu(int device) {
  if (device < 0 || device >= cuda_devices()) throw std::runtime_error("no usable GPU cuda:" + std::to_string(device));
  const auto info = cuda::device_info(device);
  return {info.name, info.major, info.minor, info.multiprocessors, info.total_bytes};
}

namespace {
EvaluatorConfig resolved(EvaluatorConfig c) {
  if (c.include_dir.empty()) c.include_dir = default_include_dir();
  if (c.worker_binary.empty()) c.worker_binary = default_worker_binary();
  return c;
}
}  // namespace

namespace {
// Spare workers started ahead per GPU pool: `fallback`, or CRUCIBLE_GPU_WARM_WORKERS (0: each started when needed).
int gpu_warm_workers(int fallback) {
  const char* env = std::getenv("CRUCIBLE_GPU_WARM_WORKERS");
  return env ? std::max(0, std::atoi(env)) : fallback;
}

// How many candidates a CUDA worker may serve, each after a verified reset (docs/cuda.md, "Reusing a worker"):
// CRUCIBLE_GPU_WORKER_REUSE, 32 by default; 1 or 0 gives every candidate a fresh worker.
int gpu_worker_uses() {
  const char* env = std::getenv("CRUCIBLE_GPU_WORKER_REUSE");
  return env ? std::max(1, std::atoi(env)) : 32;
}

// Set while a candidate is evaluated again in a fresh worker (see the end of Evaluator::evaluate).
thread_local bool t_fresh_worker = false;
}  // namespace

// One GPU's resources, made on its first evaluation: prestarted CUDA workers (each with its context), the device
// memory lent to them, their control page, and the L2 flush buffer.
struct GpuResources {
  int device = 0;
  cuda::DeviceInfo info;
  std::unique_ptr<WorkerPool> workers;
  std::unique_ptr<WorkerPool> triton_workers;  // made on the first Triton candidate
  cuda::SharedDeviceMemory tensors;
  SharedArena control;
  std::unique_ptr<cuda::L2Flush> flush;
  std::unique_ptr<cuda::HeldTimer> held;  // references' timer under queued launches
};

struct Evaluator::Cache {
  std::map<std::string, std::unique_ptr<InputPool>> pools;
  TaskTimings timings;
  // GPU timing keys by task (see shared_timing.h): what this evaluator can hand on, and what it may take.
  std::map<std::string, std::set<std::string>> shareable;
  std::map<std::string, std::string> fingerprints;  // by pool key: a TorchScript reference is read once
  std::set<std::string> sound_tasks;  // pool keys of tasks that passed their own checks (see StageContext::task_sound)
  std::map<int, std::unique_ptr<GpuResources>> gpus;

  static std::string pool_key(const TaskSpec& task, const std::string& device, const std::string& size_set) {
    return task.name + "|" + task.source_path + "|" + device + "|" + size_set;
  }
  bool has_pool(const TaskSpec& task, const std::string& device, const std::string& size_set) const {
    return pools.count(pool_key(task, device, size_set)) > 0;
  }

  const InputPool& pool(const TaskSpec& task, const std::string& device, const std::string& size_set,
                        const Sizes& sizes) {
    constexpr uint64_t kPoolSeed = 0x5eed5eed;
    std::string key = pool_key(task, device, size_set);
    if (auto it = pools.find(key); it != pools.end()) return *it->second;
    if (device != "cpu") pools.clear();  // one task's pools at a time on a GPU: they can be tens of GB
    auto& slot = pools[key];
    slot = std::make_unique<InputPool>(task, sizes, kPoolSeed, torch::Device(device));
    return *slot;
  }
};

namespace {

// "cuda" and "cuda:N" name GPU N (0 by default); "cpu" is the CPU; anything else is refused.
int parse_cuda_device(const std::string& device) {
  const Device d = parse_device(device, /*allow_bare_cuda=*/true);
  return d.is_cuda() ? d.index : -1;
}

void require_gpu(int device) {
  const std::string name = "cuda:" + std::to_string(device);
  if (!cuda::built_with_cuda())
    throw std::invalid_argument("device " + name + ": this build has no CUDA support (no CUDA toolkit at build time)");
  if (!torch::cuda::is_available())
    throw std::invalid_argument("device " + name + ": this LibTorch has no CUDA (or no GPU is visible)");
  if (device >= cuda::device_count())
    throw std::invalid_argument("device " + name + ": only " + std::to_string(cuda::device_count()) + " GPU(s) visible");
}

// nvcc's target for the device, with the architecture-specific variant for Hopper candidates that use wgmma.
std::string cuda_arch_for(const cuda::DeviceInfo& info, const std::string& source) {
  std::string arch = "sm_" + std::to_string(info.major) + std::to_string(info.minor);
  if (info.major == 9 && info.minor == 0 && source.find("wgmma") != std::string::npos) arch += "a";
  return arch;
}

// A task's inputs and outputs at a size set, resolved to concrete shapes.
TritonShapeSet shapes_at(const TaskSpec& task, const std::string& size_set) {
  const Sizes& sizes = task.sizes_for(size_set);
  TritonShapeSet set;
  for (const auto& t : task.inputs) set.inputs.push_back({t.dtype, resolve_shape(t, sizes)});
  for (const auto& t : task.outputs) set.outputs.push_back({t.dtype, resolve_shape(t, sizes)});
  return set;
}

TritonBuildOptions triton_build_options(const EvalOptions& options, const GpuResources& gpu) {
  TritonBuildOptions b;
  b.device = gpu.device;
  b.device_name = gpu.info.name + " sm_" + std::to_string(gpu.info.major) + std::to_string(gpu.info.minor);
  b.time_limit_s = std::max(options.compile.time_limit_s, 120.0);
  b.max_source_bytes = options.compile.max_source_bytes;
  return b;
}

std::size_t bytes_of(const std::vector<TensorShape>& shapes) {
  std::size_t total = 0;
  for (const auto& t : shapes) total += static_cast<std::size_t>(numel(t.shape)) * dtype_size(t.dtype);
  return total;
}

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

}  // namespace

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

WorkerPool::Counts Evaluator::gpu_worker_counts(int device) {
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  auto it = cache_->gpus.find(device);
  return it != cache_->gpus.end() && it->second ? it->second->workers->counts() : WorkerPool::Counts{};
}

// CRUCIBLE_WORKER_COUNTS set: each GPU's worker starts (one CUDA context each), reuses and refused resets go to
// stderr when the evaluator ends, for the benchmarks (tools/gpu_node/reuse_check.sh).
Evaluator::~Evaluator() {
  if (!std::getenv("CRUCIBLE_WORKER_COUNTS")) return;
  for (const auto& [device, g] : cache_->gpus) {
    if (!g) continue;
    const auto n = g->workers->counts();
    std::fprintf(stderr, "worker counts cuda:%d: started %d reused %d resets_passed %d resets_refused %d ended %d%s%s\n",
                 device, n.started, n.reused, n.resets_passed, n.resets_refused, n.ended,
                 n.last_refusal.empty() ? "" : "; last refusal: ", n.last_refusal.c_str());
  }
}

// A GPU's key names what its reference timing depends on and nothing local (no path, no ordinal), so evaluators of
// the same GPU model can share it (shared_timing.h); on the CPU, timing pairs each candidate sample with a reference
// sample and nothing is shared.
std::string Evaluator::timing_key(const TaskSpec& task, const cuda::DeviceInfo* gpu, const std::string& pool_device,
                                  const std::string& size_set, const StageContext& ctx, int arena_sets) {
  const std::string settings = size_set + "|" + std::to_string(ctx.timed) + "|" + std::to_string(ctx.warmup) + "|" +
                               (ctx.full ? "full" : "fast") + "|" + std::to_string(arena_sets) + "|" +
                               std::to_string(config_.threads) + (ctx.gpu && ctx.gpu->held ? "|queued" : "");
  if (!gpu) return task.name + "|" + task.source_path + "|" + pool_device + "|" + settings;
  auto& fingerprint = cache_->fingerprints[Cache::pool_key(task, pool_device, size_set)];
  if (fingerprint.empty()) fingerprint = task_fingerprint(task);
  const std::string key = task.name + "|" + fingerprint + "|" + gpu->name + "|sm_" + std::to_string(gpu->major) +
                          std::to_string(gpu->minor) + "|" + std::to_string(gpu->multiprocessors) + " SMs|driver " +
                          std::to_string(gpu->driver_version) + "|torch " + TORCH_VERSION + "|" + settings;
  cache_->shareable[shared_task_name(task.name)].insert(key);
  return key;
}

std::vector<SharedTiming> Evaluator::shared_timings(const std::string& task) const {
  std::vector<SharedTiming> out;
  auto keys = cache_->shareable.find(task);
  if (keys == cache_->shareable.end()) return out;
  const auto& known = cache_->timings;
  for (const auto& key : keys->second) {
    auto reference = known.reference.find(key);
    if (reference == known.reference.end()) continue;
    auto sampled = known.sampled.find(key);
    out.push_back({task, key, reference->second,
                   sampled == known.sampled.end() ? RefreshChoice::unknown
                   : sampled->second              ? RefreshChoice::sampled
                                                  : RefreshChoice::whole});
  }
  return out;
}

int Evaluator::adopt_timings(const std::vector<SharedTiming>& timings) {
  int adopted = 0;
  auto& known = cache_->timings;
  for (const auto& t : timings) {
    if (!plausible(t)) continue;
    // What this evaluator measured itself stays; an entry is taken whole or not at all.
    if (known.reference.count(t.key) || known.sampled.count(t.key)) continue;
    known.reference[t.key] = t.reference;
    if (t.refresh != RefreshChoice::unknown) known.sampled[t.key] = t.refresh == RefreshChoice::sampled;
    cache_->shareable[t.task].insert(t.key);
    ++adopted;
  }
  return adopted;
}

CompileOptions Evaluator::compile_options(const std::string& source, const EvalOptions& options,
                                          const cuda::DeviceInfo* gpu) {
  CompileOptions copts = options.compile;
  const int cuda_device = parse_cuda_device(options.device);
  copts.backend = cuda_device >= 0 ? "cuda" : "cpu";
  if (cuda_device >= 0) {
    if (gpu) {
      copts.cuda_arch = cuda_arch_for(*gpu, source);
    } else {
      std::lock_guard<std::mutex> lock(gpu_mutex_);
      copts.cuda_arch = cuda_arch_for(gpu_resources(cuda_device).info, source);
    }
  }
  return copts;
}

CompileResult Evaluator::compile(const std::string& source, const EvalOptions& options) {
  // A Triton candidate is compiled at its task's shapes, which only its evaluation knows: nothing to build ahead.
  if (options.kind == CandidateKind::triton) {
    CompileResult nothing;
    nothing.outcome = CompileResult::Outcome::ok;
    nothing.log = "a Triton candidate is compiled when it is evaluated, at its task's shapes";
    return nothing;
  }
  return compiler_.compile(source, compile_options(source, options, nullptr));
}

void Evaluator::prepare(const std::string& device) {
  const int cuda_device = parse_cuda_device(device);
  if (cuda_device < 0) return;
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  WorkerPool& spares = *gpu_resources(cuda_device).workers;
  // A device whose workers cannot start would turn every candidate into an evaluator error: said at once instead.
  if (spares.warm() > 0 && spares.wait_started() == 0)
    throw std::runtime_error("device " + device + ": none of its " + std::to_string(spares.warm()) +
                             " spare CUDA workers started (see the worker binary, the driver and the GPU's memory)");
}

GpuResources& Evaluator::gpu_resources(int device) {
  auto& slot = cache_->gpus[device];
  if (slot) return *slot;
  require_gpu(device);
  const fs::path binary = config_.cuda_worker_binary.empty() ? default_cuda_worker_binary() : config_.cuda_worker_binary;
  if (binary.empty() || !fs::exists(binary))
    throw std::invalid_argument("device cuda:" + std::to_string(device) + ": the CUDA worker binary is missing (" +
                                binary.string() + ")");
  auto g = std::make_unique<GpuResources>();
  g->device = device;
  cuda::use_device(device);
  g->info = cuda::device_info(device);
  // References in full float32, as the task's tolerances assume: no TF32 in cuBLAS or cuDNN.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  const int warm = gpu_warm_workers(config_.gpu_warm_workers);
  // A worker sees only its own GPU (as device 0): the driver sets up no other GPU for it, and it holds no other GPU's
  // device files. MIG instances keep the evaluator's view (their names are not a plain device UUID).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool mig = visible && std::string(visible).find("MIG-") != std::string::npos;
  g->workers = std::make_unique<WorkerPool>(
      binary, warm, std::vector<std::string>{"--device", mig ? std::to_string(device) : "0"}, 10.0,
      mig ? std::string() : g->info.uuid);
  g->workers->set_reuse(gpu_worker_uses());
  g->control.reserve(protocol::kControlBytes);
  g->flush = std::make_unique<cuda::L2Flush>(g->info.l2_bytes);
  g->held = std::make_unique<cuda::HeldTimer>();
  slot = std::move(g);
  return *slot;
}

namespace {
// What every verdict says of the evaluation before any stage runs.
Verdict verdict_header(const TaskSpec& task, const EvalOptions& options, int threads) {
  Verdict v;
  v.task = task.name;
  const int cuda_device = parse_cuda_device(options.device);
  v.device = cuda_device >= 0 ? "cuda:" + std::to_string(cuda_device) : options.device;
  v.mode = std::string(mode_name(options.mode));
  // Only a Triton worker holds its calls (see docs/cuda.md): a CPU or CUDA C++ candidate is timed as launched.
  const bool held = cuda_device >= 0 && options.kind == CandidateKind::triton;
  v.launches = held ? options.launches : Launches::eager;
  v.threads = threads;
  return v;
}
}  // namespace

Verdict Evaluator::evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options) {
  const auto start = Clock::now();
  const bool full = options.mode == Mode::full;
  const int sets = std::max(1, std::min(options.input_sets, 8));

  Verdict v = verdict_header(task, options, config_.threads);
  auto finish = [&]() -> Verdict {
    v.stages.total_s = since(start);
    v.stages.overhead_s = std::max(0.0, v.stages.total_s - v.stages.compile_s - v.stages.kernel_s);
    // Details may quote the candidate (a worker's load error, a refused symbol): they leave as valid UTF-8. (The
    // compile log already is: the compiler makes its excerpt so.)
    for (auto& r : v.reasons) r.detail = valid_utf8(r.detail);
    return v;
  };

  const int cuda_device = parse_cuda_device(options.device);
  const std::string backend = cuda_device >= 0 ? "cuda" : "cpu";
  GpuResources* gpu = nullptr;
  if (cuda_device >= 0) {
    std::lock_guard<std::mutex> lock(gpu_mutex_);
    gpu = &gpu_resources(cuda_device);
    // The calling thread's current device: an evaluator may serve several threads (a node's pullers of one GPU),
    // and the one that set up this GPU's resources may not be the one evaluating now.
    cuda::use_device(cuda_device);
  }
  const std::string size_set = options.sizes.empty() ? backend : options.sizes;
  if (const auto& cases = task.cases_for(size_set); !cases.empty())
    return evaluate_cases(task, cases, size_set, source, options);
  ReferenceFn reference = reference_for(task, size_set, gpu ? torch::Device(torch::kCUDA, cuda_device) : torch::kCPU);
  const Sizes& sizes = task.sizes_for(size_set);
  auto [in_shapes, out_shapes] = shapes_at(task, size_set);

  // 1-2. Compile and gate. A Triton candidate is gated on its source, then compiled by Triton (see
  // triton_candidate.h); a native one is compiled, then gated on its shared object.
  std::filesystem::path candidate_path;
  WorkerPool* triton_pool = nullptr;
  WorkerPool* kernelbench_pool = nullptr;
  if (options.kind == CandidateKind::triton) {
    if (!build_triton(source, options, gpu, in_shapes, out_shapes, v, candidate_path, triton_pool))
      return finish();
  } else if (options.kind == CandidateKind::kernelbench) {
    if (!build_kernelbench(task, size_set, source, options, v, candidate_path, kernelbench_pool)) return finish();
  } else {
    CompileOptions copts = compile_options(source, options, gpu ? &gpu->info : nullptr);
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
      case CompileResult::Outcome::environment_error:
        v.status = Status::compile_error;
        v.reasons.push_back({"compile_environment", "not the candidate's fault, and not cached: " + compiled.log});
        return finish();
    }
    auto gate_start = Clock::now();
    GatePolicy policy{backend, task.allow_imports, copts.max_binary_bytes};
    auto refusals = check_shared_object(compiled.so_path, policy);
    v.stages.gate_s = since(gate_start);
    if (!refusals.empty()) {
      v.status = Status::rejected;
      v.reasons = std::move(refusals);
      return finish();
    }
    candidate_path = compiled.so_path;
  }

  v.seed = options.seed ? *options.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();

  // 3. Load into a sandboxed worker.
  auto load_start = Clock::now();
  const std::string pool_device = gpu ? "cuda:" + std::to_string(cuda_device) : "cpu";
  int arena_sets = sets;
  if (gpu) {
    cuda::DeviceInfo now = cuda::device_info(cuda_device);
    now.free_bytes += gpu->tensors.size();  // the arena is reused
    arena_sets = sets_that_fit(now, in_shapes, out_shapes, sets, cache_->has_pool(task, pool_device, size_set));
  }
  ArenaLayout layout = plan_arena(in_shapes, out_shapes, arena_sets);
  GpuStage gpu_stage;
  std::unique_ptr<WorkerProcess> worker;
  CallOutcome loaded;
  if (gpu) {
    const bool trace = trace_calls();
    WorkerPool& workers = triton_pool ? *triton_pool : *gpu->workers;
    worker = t_fresh_worker ? workers.acquire_fresh() : workers.acquire();
    if (trace) std::fprintf(stderr, "load: worker acquired after %.1f ms\n", since(load_start) * 1e3);
    gpu->tensors.reserve(layout.bytes);
    gpu_stage = {cuda_device, gpu->tensors.data(), gpu->flush.get(), 0.0};
    gpu_stage.own_kernels_only = triton_pool != nullptr;
    // Held calls are trusted only where the candidate cannot reach its worker's control block: a CUDA C++ candidate
    // shares the worker's memory and could say it returned from launching while its work had run unheld.
    const bool queued = options.launches == Launches::queued && triton_pool;
    if (queued && gpu->held->available()) gpu_stage.held = gpu->held.get();
    for (const auto& set : layout.outputs)
      for (const auto& slot : set) {
        poison(ArenaRef{gpu_stage.tensors, cuda_device}, slot, 0);
        fill_guard(ArenaRef{gpu_stage.tensors, cuda_device}, slot);
      }
    cuda::synchronize();
    DeviceShare share;
    share.device = cuda_device;
    share.ipc_handle = gpu->tensors.ipc_handle();
    if (trace) std::fprintf(stderr, "load: arena ready after %.1f ms\n", since(load_start) * 1e3);
    share.bytes = gpu->tensors.size();
    share.null_calls = 20;
    share.queued_launches = queued;
    share.before_call = [flush = gpu->flush.get()] {
      flush->run();
      cuda::synchronize();
    };
    const bool reused = worker->uses() > 0;
    loaded = worker->load(candidate_path, layout, gpu->control, options.limits, options.call_timeout_s, &share);
    if (reused && !loaded.ok()) {  // whatever went wrong, the candidate gets the fresh worker it would have had
      worker = workers.acquire_fresh();
      loaded = worker->load(candidate_path, layout, gpu->control, options.limits, options.call_timeout_s, &share);
    }
    const auto& null_calls = worker->null_call_seconds();
    if (!null_calls.empty()) gpu_stage.null_call_s = summarize_times(null_calls).median_us;  // in seconds here
    const auto& null_launches = worker->null_launch_seconds();
    if (!null_launches.empty()) gpu_stage.null_launch_s = summarize_times(null_launches).median_us;
    if (trace)
      std::fprintf(stderr, "load: null call %.1f us, null launch %.1f us\n", gpu_stage.null_call_s * 1e6,
                   gpu_stage.null_launch_s * 1e6);
  } else {
    worker = kernelbench_pool ? kernelbench_pool->acquire() : pool_.acquire();
    // Candidate and reference are timed in turns on one core (see share_cpu); a reference on several threads
    // needs the others.
    if (config_.threads == 1) worker->share_cpu();
    arena_.reserve(layout.bytes);
    // Whatever an earlier candidate left in the outputs is overwritten before anyone can read it.
    for (const auto& set : layout.outputs)
      for (const auto& slot : set) {
        poison(ArenaRef{arena_.data(), -1}, slot, 0);
        fill_guard(ArenaRef{arena_.data(), -1}, slot);
      }
    loaded = worker->load(candidate_path, layout, arena_, options.limits, options.call_timeout_s, nullptr,
                          kHostNullCalls);
  }
  v.stages.load_s = since(load_start);
  if (classify_failure(loaded, v)) return finish();

  StageContext ctx{task, reference, cache_->pool(task, pool_device, size_set, sizes), layout, *worker, out_shapes};
  ctx.gpu = gpu ? &gpu_stage : nullptr;
  ctx.seed = v.seed;
  ctx.input_key = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  ctx.full = full;
  if (!gpu && !worker->null_call_cpu_seconds().empty())
    ctx.harness_cpu_s = summarize_times(worker->null_call_cpu_seconds()).median_us;  // in seconds here
  // At least two trials: a verdict needs one, and the fixed-answer check needs a second; a task whose outputs
  // concentrate needs more, whatever the mode.
  ctx.trials = std::max({2, task.min_correctness_trials,
                         options.correctness_trials >= 0 ? options.correctness_trials : (full ? 5 : 2)});
  ctx.timed = options.timing_trials >= 0 ? options.timing_trials : (full ? 50 : 5);
  ctx.warmup = options.warmup_calls >= 0 ? options.warmup_calls : (full ? 3 : 1);
  const int full_verified = gpu ? std::max(kGpuVerifiedTimedCalls, ctx.sets()) : ctx.timed;
  ctx.verified = std::min(ctx.timed, options.verified_timed_calls >= 0 ? options.verified_timed_calls
                                                                       : (full ? full_verified : 0));
  ctx.timeout_s = options.call_timeout_s;
  // The budget counts from the start of loading; compiling has its own limit.
  ctx.started = load_start;
  ctx.planned_calls = ctx.trials + 1 + 8 + ctx.warmup * ctx.sets() + (gpu ? 1 : 8) * ctx.timed;
  ctx.budget_derived = options.evaluation_budget_s <= 0.0;
  ctx.budget_s = ctx.budget_derived ? options.min_evaluation_budget_s : options.evaluation_budget_s;

  // 4. Correctness.
  auto correctness_start = Clock::now();
  const std::string task_key = Cache::pool_key(task, pool_device, size_set);
  ctx.task_sound = cache_->sound_tasks.count(task_key) > 0;
  bool go_on = check_correctness(ctx, v);
  if (ctx.task_sound) cache_->sound_tasks.insert(task_key);
  v.stages.correctness_s = since(correctness_start);

  // 5. Timing.
  if (go_on) {
    auto timing_start = Clock::now();
    const std::string key = timing_key(task, gpu ? &gpu->info : nullptr, pool_device, size_set, ctx, arena_sets);
    {
      // No spare worker makes its CUDA context while calls are timed (see WorkerPool::pause_starts).
      StartsPaused paused(gpu ? std::vector<WorkerPool*>{gpu->workers.get(), gpu->triton_workers.get()}
                              : std::vector<WorkerPool*>{});
      measure_timing(ctx, v, cache_->timings, key);
    }
    v.stages.timing_s = since(timing_start);
    // A worker that could not hold its calls, or stopped (its candidate waited for the GPU while launching), was
    // timed as launched: the verdict says so.
    if (gpu && !worker->holding()) v.launches = Launches::eager;
    if (v.status == Status::correct && !v.speedup && v.candidate_time && v.reference_time &&
        v.candidate_time->median_us > 0)
      v.speedup = v.reference_time->median_us / v.candidate_time->median_us;
    if (!task.flops.empty() && v.candidate_time && v.candidate_time->median_us > 0)
      v.gflops = evaluate_product(task.flops, sizes) / (v.candidate_time->median_us * 1e-6) / 1e9;
    // The least traffic any implementation needs: every input read once, every output written once.
    if (v.candidate_time && v.candidate_time->median_us > 0)
      v.gbps = static_cast<double>(bytes_of(in_shapes) + bytes_of(out_shapes)) /
               (v.candidate_time->median_us * 1e-6) / 1e9;
  }
  v.stages.kernel_s = ctx.kernel_s;
  if (gpu && !triton_pool) {
    // A reused worker's candidate that is not judged correct is judged again in a fresh worker, whose verdict
    // stands: nothing an earlier candidate left behind can cost a later one its verdict.
    if (worker->uses() > 1 && v.status != Status::correct && !t_fresh_worker) {
      worker.reset();
      struct FreshWorkers {
        FreshWorkers() { t_fresh_worker = true; }
        ~FreshWorkers() { t_fresh_worker = false; }
      } fresh;
      return evaluate(task, source, options);
    }
    gpu->workers->recycle(std::move(worker), v.status == Status::correct, options.call_timeout_s);
  }
  return finish();
}

}  // namespace crucible::eval

namespace crucible::eval {
namespace {

// What a Triton build's outcome makes of the verdict: true when the candidate can be loaded.
bool accept_triton_build(const TritonBuild& built, Verdict& v) {
  v.compile = {built.cached, built.seconds, built.hash, built.log};
  v.stages.compile_s = built.seconds;
  switch (built.outcome) {
    case TritonBuild::Outcome::ok: return true;
    case TritonBuild::Outcome::rejected:
      v.status = Status::rejected;
      v.reasons = built.refusals;
      return false;
    case TritonBuild::Outcome::source_too_large:
      v.status = Status::rejected;
      v.reasons.push_back({"source_too_large", built.log});
      return false;
    case TritonBuild::Outcome::timed_out:
      v.status = Status::compile_error;
      v.reasons.push_back({"compile_timeout", built.log});
      return false;
    case TritonBuild::Outcome::failed:
      v.status = Status::compile_error;
      v.reasons.push_back({"compiler_error", "Triton could not compile a kernel (see compile log)"});
      return false;
    case TritonBuild::Outcome::environment_error:
      v.status = Status::compile_error;
      v.reasons.push_back({"compile_environment", "not the candidate's fault, and not cached: " + built.log});
      return false;
  }
  return false;
}

}  // namespace

bool Evaluator::build_triton(const std::string& source, const EvalOptions& options, GpuResources* gpu,
                             const std::vector<TensorShape>& in_shapes,
                             const std::vector<TensorShape>& out_shapes, Verdict& v, fs::path& candidate_path,
                             WorkerPool*& pool) {
  auto refuse = [&](const std::string& why) {
    v.status = Status::rejected;
    v.reasons.push_back({"triton_unavailable", why});
    return false;
  };
  if (!gpu)
    return refuse("Triton candidates run on a GPU node; this evaluation is on the CPU (evaluate with --device cuda)");
  std::string why;
  const auto python = find_triton_python(why);
  if (!python) return refuse(why);
  const fs::path support = default_python_worker_support();
  if (support.empty() || !fs::exists(support)) return refuse("the Triton worker's support library is missing (" + support.string() + ")");

  TritonBuild built = build_triton_candidate(*python, source, {{in_shapes, out_shapes}}, config_.cache_dir,
                                             triton_build_options(options, *gpu));
  if (!accept_triton_build(built, v)) return false;
  candidate_path = built.candidate_path;
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (!gpu->triton_workers) {
    const fs::path warm_cache = config_.cache_dir / "triton" / "worker-warm";
    std::error_code ec;
    fs::create_directories(warm_cache, ec);
    // Each worker imports PyTorch and Triton and makes its own CUDA context: about 2.5 s, and a few hundred MB of
    // GPU memory. A multi-shape task takes a fresh worker for each shape every ~1.5 s, so three start ahead (with
    // one, a cached TriMul evaluation waited 1.6-2.4 s for each of its seven workers).
    gpu->triton_workers = std::make_unique<WorkerPool>(
        python->executable, gpu_warm_workers(3),
        std::vector<std::string>{"-I", (default_python_dir() / "crucible_triton" / "worker.py").string(), "--device",
                                 std::to_string(gpu->device), "--support", support.string(), "--warm-cache",
                                 warm_cache.string()},
        120.0);
  }
  pool = gpu->triton_workers.get();
  return true;
}

}  // namespace crucible::eval

namespace crucible::eval {

// A Triton candidate's shapes compiled by one step before the first is evaluated: PyTorch, Triton and a CUDA context
// start once rather than once per shape, and kernels whose specialisation does not change are compiled once. Each
// shape's evaluation then finds its build cached. A failure here is left for the shape that has it to report.
std::optional<TritonBuild> Evaluator::prebuild_triton(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                                      const std::string& size_set, const std::string& source,
                                                      const EvalOptions& options) {
  const int cuda_device = parse_cuda_device(options.device);
  if (options.kind != CandidateKind::triton || cuda_device < 0 || cases.size() < 2) return std::nullopt;
  std::string why;
  const auto python = find_triton_python(why);
  if (!python) return std::nullopt;
  GpuResources* gpu = nullptr;
  {
    std::lock_guard<std::mutex> lock(gpu_mutex_);
    gpu = &gpu_resources(cuda_device);
  }
  std::vector<TritonShapeSet> sets;
  for (const auto& c : cases) sets.push_back(shapes_at(task.at_case(c, size_set), size_set));
  return build_triton_candidate(*python, source, sets, config_.cache_dir, triton_build_options(options, *gpu));
}

// Each shape is evaluated as a task of its own (its own inputs, pools and reference timing); the first shape that is
// not correct decides the verdict, which names it.
Verdict Evaluator::evaluate_cases(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                  const std::string& size_set, const std::string& source, const EvalOptions& options) {
  Verdict combined;
  double log_candidate = 0.0, log_reference = 0.0;
  auto add_stages = [](StageTimes& a, const StageTimes& b) {
    a.compile_s += b.compile_s, a.gate_s += b.gate_s, a.load_s += b.load_s, a.correctness_s += b.correctness_s;
    a.timing_s += b.timing_s, a.total_s += b.total_s, a.kernel_s += b.kernel_s, a.overhead_s += b.overhead_s;
  };
  EvalOptions o = options;
  o.sizes = size_set;
  const std::optional<TritonBuild> prebuilt = prebuild_triton(task, cases, size_set, source, o);
  if (prebuilt && prebuilt->outcome != TritonBuild::Outcome::ok) {
    // A refusal or a failed compile holds for the whole candidate: reported now, not gated and compiled again by
    // each shape's evaluation after the shapes before the failing one were evaluated in full.
    Verdict v = verdict_header(task, options, config_.threads);
    accept_triton_build(*prebuilt, v);
    v.stages.total_s = prebuilt->seconds;
    for (auto& r : v.reasons) r.detail = valid_utf8(r.detail);
    return v;
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Verdict v = evaluate(task.at_case(cases[i], size_set), source, o);
    if (i == 0) {
      combined = v;
      combined.trials.clear();
      combined.stages = {};
      if (prebuilt) {  // the shapes' compile step, which each shape's evaluation then found cached
        combined.stages.compile_s = combined.stages.total_s = prebuilt->seconds;
        v.compile.cached = prebuilt->cached;
        v.compile.seconds += prebuilt->seconds;
        combined.compile = v.compile;
      }
      combined.candidate_event_median_us.reset();
      combined.gflops.reset();
      combined.gbps.reset();
      combined.speedup_spread.reset();
      combined.reasons.clear();
    }
    add_stages(combined.stages, v.stages);
    for (auto t : v.trials) combined.trials.push_back(t);
    if (v.status != Status::correct || !v.candidate_time || !v.reference_time) {
      v.task = task.name;
      for (auto& r : v.reasons) r.detail = "shape " + cases[i].name + ": " + r.detail;
      v.stages = combined.stages;
      return v;
    }
    for (const auto& r : v.reasons) combined.reasons.push_back({r.code, "shape " + cases[i].name + ": " + r.detail});
    combined.shapes.push_back({cases[i].name, v.candidate_time->median_us, v.reference_time->median_us,
                               v.candidate_time->cv, v.reference_time->cv});
    log_candidate += std::log(v.candidate_time->median_us);
    log_reference += std::log(v.reference_time->median_us);
    combined.candidate_time->cv = std::max(combined.candidate_time->cv, v.candidate_time->cv);
    combined.reference_time->cv = std::max(combined.reference_time->cv, v.reference_time->cv);
    combined.candidate_time->retaken = combined.candidate_time->retaken || v.candidate_time->retaken;
    combined.reference_time->retaken = combined.reference_time->retaken || v.reference_time->retaken;
    if (v.launches == Launches::eager) combined.launches = Launches::eager;  // one shape timed as launched
    if (v.kernel_coverage && combined.kernel_coverage)
      combined.kernel_coverage = std::min(*combined.kernel_coverage, *v.kernel_coverage);
  }
  const double n = static_cast<double>(cases.size());
  combined.task = task.name;
  // Each shape's median enters once: min and max are over the shapes, mean and median their geometric mean.
  auto over_shapes = [&](TimingStats& t, double log_sum, double ShapeTime::*field) {
    t.median_us = t.mean_us = std::exp(log_sum / n);
    t.min_us = t.max_us = combined.shapes.front().*field;
    for (const auto& s : combined.shapes) t.min_us = std::min(t.min_us, s.*field), t.max_us = std::max(t.max_us, s.*field);
  };
  over_shapes(*combined.candidate_time, log_candidate, &ShapeTime::candidate_us);
  over_shapes(*combined.reference_time, log_reference, &ShapeTime::reference_us);
  combined.speedup = combined.reference_time->median_us / combined.candidate_time->median_us;
  return combined;
}

}  // namespace crucible::eval

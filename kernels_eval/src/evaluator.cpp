#include "crucible/eval/evaluator.h"

#include <malloc.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <torch/version.h>

#include "crucible/eval/shared_timing.h"
#include "crucible/eval/worker_protocol.h"
#include "evaluator_impl.h"

namespace crucible::eval {
namespace fs = std::filesystem;

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

// How many candidates a CUDA worker may serve, each after a verified reset (docs/cuda.md, "Reusing a worker"):
// CRUCIBLE_GPU_WORKER_REUSE, 32 by default; 1 or 0 gives every candidate a fresh worker.
int gpu_worker_uses() {
  const char* env = std::getenv("CRUCIBLE_GPU_WORKER_REUSE");
  return env ? std::max(1, std::atoi(env)) : 32;
}

void require_gpu(int device) {
  const std::string name = Device::cuda(device).name();
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

}  // namespace

int gpu_warm_workers(int fallback) {
  const char* env = std::getenv("CRUCIBLE_GPU_WARM_WORKERS");
  return env ? std::max(0, std::atoi(env)) : fallback;
}

// The public face: each call is the implementation's.
Evaluator::Evaluator(EvaluatorConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Evaluator::~Evaluator() = default;

Verdict Evaluator::evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options) {
  return impl_->evaluate(task, source, options);
}
CompileResult Evaluator::compile(const std::string& source, const EvalOptions& options) {
  return impl_->compile(source, options);
}
void Evaluator::prepare(Device device) { impl_->prepare(device); }
const EvaluatorConfig& Evaluator::config() const { return impl_->config; }
WorkerCounts Evaluator::cpu_worker_counts() const { return impl_->pool.counts(); }

void Evaluator::release_device_memory(Device device) { impl_->release_device_memory(device); }

WorkerCounts Evaluator::gpu_worker_counts(int device) {
  std::lock_guard<std::mutex> lock(impl_->gpu_mutex);
  auto& gpus = impl_->cache.gpus;
  auto it = gpus.find(device);
  return it != gpus.end() && it->second ? it->second->workers->counts() : WorkerCounts{};
}

Evaluator::Impl::Impl(EvaluatorConfig c)
    : config(resolved(std::move(c))),
      compiler(config.cache_dir, config.include_dir),
      pool(config.worker_binary, config.warm_workers) {
  torch::set_num_threads(config.threads);
  // Non-dumpable: a worker (which runs without capabilities) cannot open this process's /proc/<pid>/mem,
  // where the references live.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Tensors of a few MB come and go for every trial. glibc would map and unmap each one, and every first
  // touch of a fresh page faults (expensive in a VM); keeping freed blocks in the heap makes the evaluator's
  // own work, and the reference's output allocations inside timed calls, cost what they cost in steady state.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void Evaluator::Impl::release_device_memory(Device device) {
  if (!device.is_cuda()) return;
  std::lock_guard<std::mutex> lock(gpu_mutex);
  auto it = cache.gpus.find(device.index);
  if (it == cache.gpus.end() || !it->second) return;
  GpuResources& g = *it->second;
  // A kept worker maps the arena through CUDA IPC, and an arena freed under a mapping stays allocated: they end first.
  for (WorkerPool* workers : {g.workers.get(), g.triton_workers.get(), g.kernelbench_workers.get()})
    if (workers) workers->end_kept();
  const cuda::CurrentDevice on_it(device.index);  // the calling thread (a policy's) may be on another GPU
  g.tensors.release();
  cache.drop_pools(device);
}

// CRUCIBLE_WORKER_COUNTS set: each GPU's worker starts (one CUDA context each), reuses and refused resets go to
// stderr when the evaluator ends, for the benchmarks (tools/gpu_node/reuse_check.sh).
Evaluator::Impl::~Impl() {
  if (!std::getenv("CRUCIBLE_WORKER_COUNTS")) return;
  for (const auto& [device, g] : cache.gpus) {
    if (!g) continue;
    const auto n = g->workers->counts();
    std::fprintf(stderr, "worker counts cuda:%d: started %d reused %d resets_passed %d resets_refused %d ended %d%s%s\n",
                 device, n.started, n.reused, n.resets_passed, n.resets_refused, n.ended,
                 n.last_refusal.empty() ? "" : "; last refusal: ", n.last_refusal.c_str());
  }
}

std::string EvaluatorCache::pool_key(const TaskSpec& task, Device device, const std::string& size_set) {
  return task.name + "|" + task.source_path + "|" + device.name() + "|" + size_set;
}

void EvaluatorCache::drop_pools(Device device) {
  // pool_key ends "|<device>|<size set>"; neither holds a '|'.
  for (auto it = pools.begin(); it != pools.end();) {
    const std::string& key = it->first;
    const auto last = key.rfind('|');
    const auto before = last == std::string::npos || last == 0 ? std::string::npos : key.rfind('|', last - 1);
    const bool on_device = before != std::string::npos && key.compare(before + 1, last - before - 1, device.name()) == 0;
    it = on_device ? pools.erase(it) : std::next(it);
  }
}

bool EvaluatorCache::has_pool(const TaskSpec& task, Device device, const std::string& size_set) const {
  return pools.count(pool_key(task, device, size_set)) > 0;
}

const InputPool& EvaluatorCache::pool(const TaskSpec& task, Device device, const std::string& size_set,
                                      const Sizes& sizes) {
  constexpr uint64_t kPoolSeed = 0x5eed5eed;
  std::string key = pool_key(task, device, size_set);
  if (auto it = pools.find(key); it != pools.end()) return *it->second;
  if (device.is_cuda()) pools.clear();  // one task's pools at a time on a GPU: they can be tens of GB
  auto& slot = pools[key];
  const torch::Device where = device.is_cuda() ? torch::Device(torch::kCUDA, device.index) : torch::Device(torch::kCPU);
  slot = std::make_unique<InputPool>(task, sizes, kPoolSeed, where);
  return *slot;
}

// A GPU's key names what its reference timing depends on and nothing local (no path, no ordinal), so evaluators of
// the same GPU model can share it (shared_timing.h); on the CPU, timing pairs each candidate sample with a reference
// sample and nothing is shared.
std::string Evaluator::Impl::timing_key(const Evaluation& e, const StageContext& ctx) {
  const TaskSpec& task = e.task;
  const Device device = e.options.device;
  const std::string settings = e.size_set + "|" + std::to_string(ctx.timed) + "|" + std::to_string(ctx.warmup) + "|" +
                               (ctx.full ? "full" : "fast") + "|" + std::to_string(e.arena_sets) + "|" +
                               std::to_string(config.threads) + (ctx.gpu && ctx.gpu->held ? "|queued" : "");
  if (!e.gpu) return task.name + "|" + task.source_path + "|" + device.name() + "|" + settings;
  const cuda::DeviceInfo* gpu = &e.gpu->info;
  auto& fingerprint = cache.fingerprints[EvaluatorCache::pool_key(task, device, e.size_set)];
  if (fingerprint.empty()) fingerprint = task_fingerprint(task);
  const std::string key = task.name + "|" + fingerprint + "|" + gpu->name + "|sm_" + std::to_string(gpu->major) +
                          std::to_string(gpu->minor) + "|" + std::to_string(gpu->multiprocessors) + " SMs|driver " +
                          std::to_string(gpu->driver_version) + "|torch " + TORCH_VERSION + "|" + settings;
  cache.shareable[shared_task_name(task.name)].insert(key);
  return key;
}

std::vector<SharedTiming> Evaluator::shared_timings(const std::string& task) const {
  std::vector<SharedTiming> out;
  const auto& cache = impl_->cache;
  auto keys = cache.shareable.find(task);
  if (keys == cache.shareable.end()) return out;
  const auto& known = cache.timings;
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
  auto& cache = impl_->cache;
  auto& known = cache.timings;
  for (const auto& t : timings) {
    if (!plausible(t)) continue;
    // What this evaluator measured itself stays; an entry is taken whole or not at all.
    if (known.reference.count(t.key) || known.sampled.count(t.key)) continue;
    known.reference[t.key] = t.reference;
    if (t.refresh != RefreshChoice::unknown) known.sampled[t.key] = t.refresh == RefreshChoice::sampled;
    cache.shareable[t.task].insert(t.key);
    ++adopted;
  }
  return adopted;
}

CompileOptions Evaluator::Impl::compile_options(const std::string& source, const EvalOptions& options,
                                                const cuda::DeviceInfo* gpu) {
  CompileOptions copts = options.compile;
  copts.backend = options.device.backend;
  if (options.device.is_cuda()) {
    if (gpu) {
      copts.cuda_arch = cuda_arch_for(*gpu, source);
    } else {
      std::lock_guard<std::mutex> lock(gpu_mutex);
      copts.cuda_arch = cuda_arch_for(gpu_resources(options.device.index).info, source);
    }
  }
  return copts;
}

CompileResult Evaluator::Impl::compile(const std::string& source, const EvalOptions& options) {
  // A Triton candidate is compiled at its task's shapes, which only its evaluation knows; a KernelBench one's
  // extensions are built by its evaluation, after the gate has read its source: nothing to build ahead for either.
  if (options.kind != CandidateKind::native) {
    CompileResult nothing;
    nothing.outcome = CompileResult::Outcome::ok;
    nothing.log = options.kind == CandidateKind::triton
                      ? "a Triton candidate is compiled when it is evaluated, at its task's shapes"
                      : "a KernelBench candidate's extensions are built when it is evaluated";
    return nothing;
  }
  return compiler.compile(source, compile_options(source, options, nullptr));
}

void Evaluator::Impl::prepare(Device device) {
  if (!device.is_cuda()) return;
  std::lock_guard<std::mutex> lock(gpu_mutex);
  WorkerPool& spares = *gpu_resources(device.index).workers;
  // A device whose workers cannot start would turn every candidate into an evaluator error: said at once instead.
  if (spares.warm() > 0 && spares.wait_started() == 0)
    throw std::runtime_error("device " + device.name() + ": none of its " + std::to_string(spares.warm()) +
                             " spare CUDA workers started (see the worker binary, the driver and the GPU's memory)");
}

GpuResources* Evaluator::Impl::gpu_for(Device device) {
  if (!device.is_cuda()) return nullptr;
  std::lock_guard<std::mutex> lock(gpu_mutex);
  GpuResources* gpu = &gpu_resources(device.index);
  // The calling thread's current device: an evaluator may serve several threads (a node's pullers of one GPU),
  // and the one that set up this GPU's resources may not be the one evaluating now.
  cuda::use_device(device.index);
  return gpu;
}

GpuResources& Evaluator::Impl::gpu_resources(int device) {
  auto& slot = cache.gpus[device];
  if (slot) return *slot;
  require_gpu(device);
  const fs::path binary = config.cuda_worker_binary.empty() ? default_cuda_worker_binary() : config.cuda_worker_binary;
  if (binary.empty() || !fs::exists(binary))
    throw std::invalid_argument("device " + Device::cuda(device).name() + ": the CUDA worker binary is missing (" +
                                binary.string() + ")");
  auto g = std::make_unique<GpuResources>();
  g->device = device;
  cuda::use_device(device);
  g->info = cuda::device_info(device);
  // References in full float32, as the task's tolerances assume: no TF32 in cuBLAS or cuDNN.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  const int warm = gpu_warm_workers(config.gpu_warm_workers);
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

}  // namespace crucible::eval

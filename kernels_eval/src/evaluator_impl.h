#pragma once
// The evaluator's insides: what it keeps across candidates (workers, input pools, reference timings, each GPU's
// resources), and the steps one evaluation goes through (evaluate_candidate.cpp, evaluate_triton.cpp,
// evaluate_kernelbench.cpp, evaluate_shapes.cpp).
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "crucible/eval/evaluator.h"
#include "crucible/eval/triton_candidate.h"
#include "worker_process.h"
#include "stages.h"

namespace crucible::eval {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One GPU's resources, made on its first evaluation: prestarted CUDA workers (each with its context), the device
// memory lent to them, their control page, and the L2 flush buffer.
struct GpuResources {
  int device = 0;
  cuda::DeviceInfo info;
  std::unique_ptr<WorkerPool> workers;
  std::unique_ptr<WorkerPool> triton_workers;       // made on the first Triton candidate
  std::unique_ptr<WorkerPool> kernelbench_workers;  // made on the first KernelBench candidate
  cuda::SharedDeviceMemory tensors;
  SharedArena control;
  std::unique_ptr<cuda::L2Flush> flush;
  std::unique_ptr<cuda::HeldTimer> held;  // references' timer under queued launches
};

// Input pools, reference timings and GPU resources, reused across candidates.
struct EvaluatorCache {
  std::map<std::string, std::unique_ptr<InputPool>> pools;
  TaskTimings timings;
  // GPU timing keys by task (see shared_timing.h): what this evaluator can hand on, and what it may take.
  std::map<std::string, std::set<std::string>> shareable;
  std::map<std::string, std::string> fingerprints;  // by pool key: a TorchScript reference is read once
  std::set<std::string> sound_tasks;  // pool keys of tasks that passed their own checks (see StageContext::task_sound)
  std::map<int, std::unique_ptr<GpuResources>> gpus;
  std::map<std::string, int> arena_sets;  // by pool key: the input sets a task's first GPU evaluation chose

  static std::string pool_key(const TaskSpec& task, Device device, const std::string& size_set);
  bool has_pool(const TaskSpec& task, Device device, const std::string& size_set) const;
  void drop_pools(Device device);  // every pool on that device
  const InputPool& pool(const TaskSpec& task, Device device, const std::string& size_set, const Sizes& sizes);
};

// One evaluation's state, handed from step to step.
struct Evaluation {
  const TaskSpec& task;
  const std::string& source;
  const EvalOptions& options;
  Clock::time_point start;
  Verdict v;
  GpuResources* gpu = nullptr;  // null on the CPU
  std::string size_set;
  ReferenceFn reference;
  std::vector<TensorShape> in_shapes, out_shapes;
  // Built: the shared object (a Triton candidate's module, a KernelBench candidate's plan) and, for Python
  // candidates (Triton, KernelBench), the pool of single-use Python workers that runs it.
  std::filesystem::path candidate_path;
  WorkerPool* python_pool = nullptr;
  // Loaded.
  Clock::time_point load_start;
  int arena_sets = 1;
  ArenaLayout layout;
  GpuStage gpu_stage;
  std::unique_ptr<WorkerProcess> worker;

  int cuda_device() const { return options.device.index; }
};

struct Evaluator::Impl {
  explicit Impl(EvaluatorConfig config);
  ~Impl();

  EvaluatorConfig config;
  Compiler compiler;
  WorkerPool pool;  // the CPU's candidate workers
  SharedArena arena;
  EvaluatorCache cache;
  std::mutex gpu_mutex;  // compile() may ask for a GPU's architecture from other threads
  std::unique_ptr<WorkerPool> kernelbench_workers;  // the CPU's, made on the first KernelBench candidate, under gpu_mutex

  Verdict evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options);
  CompileResult compile(const std::string& source, const EvalOptions& options);
  void prepare(Device device);
  void release_device_memory(Device device);

  GpuResources& gpu_resources(int device);  // under gpu_mutex
  // The device's resources, made on first use, with the calling thread's current device set to it; null on the CPU.
  GpuResources* gpu_for(Device device);
  CompileOptions compile_options(const std::string& source, const EvalOptions& options, const cuda::DeviceInfo* gpu);
  std::string timing_key(const Evaluation& e, const StageContext& ctx);

  // The steps of evaluate(). A step that returns false has decided the verdict.
  bool build_native(Evaluation& e);
  bool build_triton(Evaluation& e);
  bool build_kernelbench(Evaluation& e);  // evaluate_kernelbench.cpp
  bool build(Evaluation& e);  // by the candidate's kind
  bool load(Evaluation& e);
  CallOutcome load_on_gpu(Evaluation& e);
  CallOutcome load_on_cpu(Evaluation& e);
  StageContext stage_context(Evaluation& e);
  void check_and_time(Evaluation& e);
  Verdict finished(Evaluation& e) const;

  // A multi-shape task: each shape evaluated as a task of its own (evaluate_shapes.cpp).
  Verdict evaluate_cases(const TaskSpec& task, const std::vector<ShapeCase>& cases, const std::string& size_set,
                         const std::string& source, const EvalOptions& options);
  std::optional<TritonBuild> prebuild_triton(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                             const std::string& size_set, const std::string& source,
                                             const EvalOptions& options);
};

// What every verdict says of the evaluation before any stage runs.
Verdict verdict_header(const TaskSpec& task, const EvalOptions& options, int threads);
// Details may quote the candidate (a worker's load error, a refused symbol): they leave as valid UTF-8.
void clean_details(Verdict& v);
// What a Triton build's outcome makes of the verdict: true when the candidate can be loaded.
bool accept_triton_build(const TritonBuild& built, Verdict& v);
// A task's inputs and outputs at a size set, resolved to concrete shapes.
TritonShapeSet shapes_at(const TaskSpec& task, const std::string& size_set);
TritonBuildOptions triton_build_options(const EvalOptions& options, const GpuResources& gpu);
std::size_t bytes_of(const std::vector<TensorShape>& shapes);
// A pool of single-use Python workers on a GPU (Triton and KernelBench candidates): `script` under the package
// directory, `warm` started ahead, sharing the trusted Triton warm-up's cache.
std::unique_ptr<WorkerPool> python_gpu_worker_pool(const std::string& python, const std::string& script, int warm,
                                                   const std::filesystem::path& support, int device,
                                                   const std::filesystem::path& cache_dir);
// Spare workers started ahead per GPU pool: `fallback`, or CRUCIBLE_GPU_WARM_WORKERS (0: each started when needed).
int gpu_warm_workers(int fallback);

}  // namespace crucible::eval

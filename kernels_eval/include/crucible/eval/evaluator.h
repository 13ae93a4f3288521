#pragma once
// Evaluates one candidate against one task: compile, static gate, sandboxed load, correctness, timing.
// Plain C++ surface; LibTorch stays inside the implementation.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/eval_settings.h"
#include "crucible/eval/shared_timing.h"
#include "crucible/eval/task_spec.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/verdict.h"
#include "crucible/eval/worker_process.h"

namespace crucible::eval {

struct EvalOptions {
  Mode mode = Mode::fast;
  Launches launches = Launches::eager;  // GPU calls: see eval_settings.h
  CandidateKind kind = CandidateKind::native;  // triton: Python with Triton kernels, GPU devices only
  // kernelbench: PyTorch operators inside ModelNew are refused ([eval] torch_ops = "forbid"), as Crucible's own
  // contract refuses them; by default they are allowed, as KernelBench allows them.
  bool forbid_torch_ops = false;
  std::string device = "cpu";  // or "cuda" / "cuda:N"
  std::string sizes;            // the task's size set to use ("cpu", "cuda"); empty: the device's own
  // Negative values take the mode's defaults: fast 2 / 5 / 1, full 5 / 50 / 3.
  int correctness_trials = -1;
  int timing_trials = -1;
  int warmup_calls = -1;
  int input_sets = 3;           // timing rotates among these
  double call_timeout_s = 10.0;  // wall-clock limit of one call (and of loading)
  // Wall-clock limit of everything after compiling (load, correctness, timing): past it the verdict is timeout /
  // evaluation_budget. 0 derives it: min_evaluation_budget_s, or 50 times the reference's own (warm) time for every
  // call the evaluation may make, whichever is more.
  double evaluation_budget_s = 0.0;
  double min_evaluation_budget_s = 30.0;  // the least a derived budget allows
  WorkerLimits limits;
  CompileOptions compile;
  // Which windows of the input pools a trial sees. Unset: a fresh random nonce per evaluation (recorded
  // in the verdict), so no candidate can carry answers for known inputs.
  std::optional<uint64_t> seed;
  int verified_timed_calls = -1;  // timed calls checked in full: at least one per input set; full mode all on the CPU, 4 on a GPU
};

// The task itself is unusable (no reference, degenerate outputs): not a verdict on the candidate.
class TaskError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvaluatorConfig {
  std::filesystem::path cache_dir = default_cache_dir();
  std::filesystem::path include_dir;  // empty: default_include_dir()
  std::filesystem::path worker_binary;  // empty: default_worker_binary()
  std::filesystem::path cuda_worker_binary;  // empty: default_cuda_worker_binary()
  int warm_workers = 1;
  // Per GPU. A CUDA worker needs ~0.2 s to create its context: with several started ahead, each has had the time
  // of several evaluations to get ready.
  int gpu_warm_workers = 3;
  int threads = 1;  // LibTorch threads for references; candidates run single-threaded too
};

struct GpuResources;
struct StageContext;
namespace cuda {
struct DeviceInfo;
}

class Evaluator {
 public:
  explicit Evaluator(EvaluatorConfig config = {});
  ~Evaluator();

  Verdict evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options = {});
  // Stage 1 alone, with exactly the options evaluate() would use (the device's architecture included), so a
  // compile pool can build candidates ahead of their evaluation into the shared cache. Thread-safe. A Triton
  // candidate needs its task's shapes, so it is built by evaluate() and this builds nothing.
  CompileResult compile(const std::string& source, const EvalOptions& options = {});
  // Sets up, before any candidate arrives, what every evaluation on `device` needs first: on a GPU its context and
  // LibTorch's, its spare workers (returning once they have started) and its L2 flush buffer (otherwise the first
  // compile waits for them, to learn the architecture). Nothing on the CPU. Throws what an evaluation on the device
  // would (no such device, no CUDA worker), and when none of the spare workers starts.
  void prepare(const std::string& device);

  // GPU reference timings this evaluator knows for a task (measured or adopted), to hand to evaluators of the same
  // GPU model; and such timings taken in, keeping any it measured itself. Returns how many it took. Neither may run
  // beside evaluate(): a node calls them under the device's lease.
  std::vector<SharedTiming> shared_timings(const std::string& task) const;
  int adopt_timings(const std::vector<SharedTiming>& timings);

  // What became of a GPU's CUDA workers so far (started, reused, resets refused); all zero before its first use.
  WorkerPool::Counts gpu_worker_counts(int device);
  Compiler& compiler() { return compiler_; }
  WorkerPool& pool() { return pool_; }
  const EvaluatorConfig& config() const { return config_; }

 private:
  EvaluatorConfig config_;
  Compiler compiler_;
  WorkerPool pool_;
  SharedArena arena_;
  struct Cache;  // input pools, reference timings and GPU resources, reused across candidates
  std::unique_ptr<Cache> cache_;
  std::mutex gpu_mutex_;  // compile() may ask for a GPU's architecture from other threads
  GpuResources& gpu_resources(int device);  // under gpu_mutex_
  std::string timing_key(const TaskSpec& task, const cuda::DeviceInfo* gpu, const std::string& pool_device,
                         const std::string& size_set, const StageContext& ctx, int arena_sets);
  CompileOptions compile_options(const std::string& source, const EvalOptions& options, const cuda::DeviceInfo* gpu);
  Verdict evaluate_cases(const TaskSpec& task, const std::vector<ShapeCase>& cases, const std::string& size_set,
                         const std::string& source, const EvalOptions& options);
  std::optional<TritonBuild> prebuild_triton(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                             const std::string& size_set, const std::string& source,
                                             const EvalOptions& options);
  // A Triton candidate's gate and compile step, and the pool of Triton workers that will run it. False: the verdict
  // is decided (rejected, compile_error).
  // A KernelBench candidate's gate, extraction and extension builds (kernelbench_candidate.h), its plan for the task,
  // and the pool of KernelBench workers that will run it. False: the verdict is decided.
  bool build_kernelbench(const TaskSpec& task, const std::string& size_set, const std::string& source,
                         const EvalOptions& options, Verdict& v, std::filesystem::path& plan_path, WorkerPool*& pool);
  std::unique_ptr<WorkerPool> kernelbench_workers_;  // made on the first KernelBench candidate
  bool build_triton(const std::string& source, const EvalOptions& options, GpuResources* gpu,
                    const std::vector<TensorShape>& in_shapes, const std::vector<TensorShape>& out_shapes, Verdict& v,
                    std::filesystem::path& candidate_path, WorkerPool*& pool);
};

std::filesystem::path default_include_dir();
// How many GPUs this build and machine can evaluate on (0 without CUDA support, a driver or a GPU).
int cuda_devices();

// What a GPU is, as an evaluator node announces it. Throws std::runtime_error for a device that is not usable.
struct GpuDescription {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  std::size_t memory_bytes = 0;
};
GpuDescription describe_gpu(int device);
// Names of the built-in LibTorch references a task may use.
std::vector<std::string> known_references();

}  // namespace crucible::eval

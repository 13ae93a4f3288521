#pragma once
// Evaluates one candidate against one task: compile, static gate, sandboxed load, correctness, timing.
// Plain C++ surface; LibTorch, the workers and the stages stay inside the implementation.
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/eval_settings.h"
#include "crucible/eval/shared_timing.h"
#include "crucible/eval/task_spec.h"
#include "crucible/eval/verdict.h"
#include "crucible/eval/worker_counts.h"

namespace crucible::eval {

// The task itself is unusable (no reference, degenerate outputs): not a verdict on the candidate.
class TaskError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What an evaluator (one per process, or one per device on a node) is made with: where it keeps its cache and finds
// its worker binaries, and how many workers it starts ahead. Not what any evaluation asks for (EvalOptions).
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

class Evaluator {
 public:
  explicit Evaluator(EvaluatorConfig config = {});
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  Verdict evaluate(const TaskSpec& task, const std::string& source, const EvalOptions& options = {});
  // Stage 1 alone, with exactly the options evaluate() would use (the device's architecture included), so a
  // compile pool can build candidates ahead of their evaluation into the shared cache. Thread-safe. A Triton
  // candidate needs its task's shapes, so it is built by evaluate() and this builds nothing.
  CompileResult compile(const std::string& source, const EvalOptions& options = {});
  // Sets up, before any candidate arrives, what every evaluation on `device` needs first: on a GPU its context and
  // LibTorch's, its spare workers (returning once they have started) and its L2 flush buffer (otherwise the first
  // compile waits for them, to learn the architecture). Nothing on the CPU. Throws what an evaluation on the device
  // would (no such device, no CUDA worker), and when none of the spare workers starts.
  void prepare(Device device);

  // GPU reference timings this evaluator knows for a task (measured or adopted), to hand to evaluators of the same
  // GPU model; and such timings taken in, keeping any it measured itself. Returns how many it took. Neither may run
  // beside evaluate(): a node calls them under the device's lease.
  std::vector<SharedTiming> shared_timings(const std::string& task) const;
  int adopt_timings(const std::vector<SharedTiming>& timings);

  // Gives back the device memory that evaluations on a GPU keep between candidates: the arena lent to the workers
  // (the kept workers that map it end first) and the input pools, which return to LibTorch's allocator. The next
  // evaluation makes them again (its reference timings stay). For a GPU whose memory another user in this process
  // needs now (a language model policy sharing it); not beside evaluate() on that device: call it under its lease.
  // Nothing on the CPU or before the GPU's first evaluation.
  void release_device_memory(Device device);

  // What became of a GPU's CUDA workers so far (started, reused, resets refused); all zero before its first use.
  WorkerCounts gpu_worker_counts(int device);
  // What became of the CPU's candidate workers so far.
  WorkerCounts cpu_worker_counts() const;
  const EvaluatorConfig& config() const;

  struct Impl;  // kernels_eval/src/evaluator_impl.h

 private:
  std::unique_ptr<Impl> impl_;
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

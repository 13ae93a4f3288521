#pragma once
// Triton candidates (one Python file defining crucible_forward(inputs, outputs) over torch tensors, launching its own
// @triton.jit kernels): the node's Python that can run them, and their build: the static gate, then Triton's
// compilation into a per-candidate cache by a confined process, so the sandboxed worker only loads.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/compile_cache.h"
#include "crucible/eval/device.h"
#include "crucible/eval/dtype.h"
#include "crucible/eval/verdict.h"

namespace crucible::eval {

// A Python interpreter with PyTorch (with CUDA) and Triton: $CRUCIBLE_TRITON_PYTHON, else python3 on PATH. Probed
// once per process; `why` says what is missing when none is found.
struct TritonPython {
  std::string executable;        // absolute
  std::string versions;          // "torch 2.11.0+cu130, triton 3.6.0"
  std::vector<std::string> dirs;  // trees the interpreter reads (its prefixes, site-packages)
};
std::optional<TritonPython> find_triton_python(std::string& why);

// Where the Python side lives (kernels_eval/python): $CRUCIBLE_PYTHON_DIR, else the build-time default.
std::filesystem::path default_python_dir();
// The worker's native support library: $CRUCIBLE_PYTHON_WORKER_SUPPORT, else the build-time default.
std::filesystem::path default_python_worker_support();

struct TritonBuild {
  enum class Outcome { ok, rejected, failed, timed_out, source_too_large, environment_error };
  Outcome outcome = Outcome::failed;
  bool cached = false;
  double seconds = 0.0;
  std::string hash;
  std::filesystem::path candidate_path;  // <dir>/candidate.py beside gate.json and triton-cache/
  std::vector<Reason> refusals;          // the gate's, when rejected
  std::string log;
};

struct TritonBuildOptions {
  int device = 0;
  std::string device_name;  // part of the cache key: compiled code is for one GPU model
  double time_limit_s = 120.0;
  std::size_t max_source_bytes = 256 * 1024;
  std::uintmax_t max_cache_bytes = default_cache_max_bytes();  // the cache is pruned to it after each new build
};

// One set of a task's shapes: its inputs and outputs at one size set (or one case of a multi-shape task).
struct TritonShapeSet {
  std::vector<TensorShape> inputs, outputs;
};

// Gate, then compile (cached by source, shapes and device). The shape sets are the task's at the size set evaluated:
// one, or every case of a multi-shape task, compiled by one step (the outcome is then the first failure's).
TritonBuild build_triton_candidate(const TritonPython& python, const std::string& source,
                                   const std::vector<TritonShapeSet>& shape_sets,
                                   const std::filesystem::path& cache_dir, const TritonBuildOptions& options);

// The gate alone, for machines without a GPU (tests, and a `crucible eval` that explains a refusal).
std::vector<Reason> triton_gate(const std::string& python, const std::string& source,
                                const std::vector<DType>& dtypes, std::string& error);

}  // namespace crucible::eval

#pragma once
// KernelBench-format candidates: one Python file defining `class ModelNew(nn.Module)` whose kernels come from
// torch.utils.cpp_extension.load_inline (or @triton.jit on a GPU). Their build: the static gate and the static
// extraction of load_inline's sources (kernels_eval/python/crucible_kernelbench, nothing of the candidate runs),
// then each extension compiled by Crucible's compiler (sandboxed, content-cached; with Crucible's own bindings
// instead of pybind11 where they build, ExtensionBuild) against the headers of the Python that will run the worker,
// and passed through the symbol gate.
// The worker's load_inline returns those modules; it never compiles.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/device.h"
#include "crucible/eval/dtype.h"
#include "crucible/eval/task_spec.h"
#include "crucible/eval/verdict.h"

namespace crucible::eval {

// The Python that runs KernelBench workers and whose PyTorch the extensions are built against:
// $CRUCIBLE_KERNELBENCH_PYTHON, else /usr/bin/python3 where it has torch, else python3 on PATH; with `need_cuda`, the
// first of them whose PyTorch sees a GPU. Probed once.
struct KernelBenchPython {
  std::string executable;
  std::string versions;                    // "torch 1.13.0a0, python 3.11.2"
  std::vector<std::string> dirs;           // trees the interpreter reads (prefixes, site-packages)
  std::vector<std::string> include_dirs;   // torch.utils.cpp_extension.include_paths() and Python's headers
  std::vector<std::string> library_dirs;   // torch's libraries
  int cxx11_abi = 1;
  bool cuda = false;                       // its PyTorch sees a GPU
};
std::optional<KernelBenchPython> find_kernelbench_python(std::string& why, bool need_cuda = false);

struct KernelBenchExtension {
  std::string name;
  std::vector<std::string> functions;
  std::filesystem::path so_path;
};

struct KernelBenchBuild {
  enum class Outcome { ok, rejected, compile_error, source_too_large, environment_error };
  Outcome outcome = Outcome::environment_error;
  std::filesystem::path candidate_path;  // <cache>/kernelbench/<hash>/candidate.py
  std::vector<KernelBenchExtension> extensions;
  std::vector<std::string> kernels;      // @triton.jit functions
  std::vector<std::string> cuda_kernels;  // the extensions' CUDA kernels, by device name (the profiler's)
  std::vector<Reason> refusals;          // the gate's or the symbol gate's, when rejected
  CompileResult compile;                 // the last extension's compile (its log on compile_error)
  bool lean = false;                     // every extension was built with Crucible's lean bindings
  double seconds = 0.0;
};

// How an extension's unit is built. lean: with Crucible's bindings on Python's C API and torch/types.h, precompiled
// (seconds), falling back to load_inline's own unit where that fails; precompiled: load_inline's unit with
// torch/extension.h precompiled; plain: load_inline's unit as written (benchmarks compare the three).
enum class ExtensionBuild { lean, precompiled, plain };

struct KernelBenchBuildOptions {
  Backend backend = Backend::cpu;  // cpu: cpp_sources only; cuda: nvcc builds CUDA sources
  std::string cuda_arch = "sm_90";
  bool forbid_torch_ops = false;  // [eval] torch_ops = "forbid"
  ExtensionBuild extension_build = ExtensionBuild::lean;
  std::vector<DType> dtypes;      // the task's, for the precision rules
  double time_limit_s = 120.0;
  std::size_t max_source_bytes = 256 * 1024;
};

// Gate, extraction, compile and symbol gate. Thread-safe for distinct sources.
KernelBenchBuild build_kernelbench_candidate(const KernelBenchPython& python, Compiler& compiler,
                                             const std::string& source, const KernelBenchBuildOptions& options);

// The gate and extraction alone: refusals (empty when the candidate passes) and, in `units`, each extension's name
// and translation unit. `error` is set when the analysis itself did not run.
std::vector<Reason> kernelbench_analyze(const std::string& python, const std::string& source,
                                        const KernelBenchBuildOptions& options,
                                        std::vector<std::pair<std::string, std::string>>* units, std::string& error);

// The CUDA kernels of a module nvcc built, by their device names (as a profiler reports them); empty when it has
// none or its symbol table cannot be read.
std::vector<std::string> cuda_kernel_names(const std::filesystem::path& so_path);

// How the worker builds ModelNew for a task: get_init_inputs()'s values at the size set, how many inputs the problem's
// forward takes, and the names of the parameter inputs after them (module paths, '.' as '_'). Written beside the
// candidate, one per task and size set; its path is what the worker is asked to load.
std::filesystem::path write_kernelbench_plan(const KernelBenchBuild& build, const TaskSpec& task,
                                             const std::string& size_set);

// A KernelBench worker's classified refusal ("code: detail", from its load reply or a call): the verdict's status
// and reason, or nothing for any other text.
std::optional<std::pair<Status, Reason>> kernelbench_refusal(const std::string& text);

}  // namespace crucible::eval

#pragma once
// KernelBench answers whose kernels are @triton.jit functions, on a GPU. The sandboxed worker cannot run ptxas, so
// before it loads the answer a compile step (crucible_kernelbench/compile_triton.py, a Triton compile step:
// triton_step.h) builds ModelNew as the worker will, from the plan, and calls forward once on scratch inputs of the
// task's shapes: Triton compiles every kernel the answer launches into <the answer's build>/triton-cache, the
// directory the worker's TRITON_CACHE_DIR names (the Triton worker's own rule: beside the file it is asked to load).
#include <filesystem>
#include <string>

#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/triton_candidate.h"

namespace crucible::eval {

struct TritonStep;  // triton_step.h (which needs nlohmann's JSON, as the evaluator's torch side does not)

// The answer's Triton cache: where its compile step writes and its worker reads.
std::filesystem::path kernelbench_triton_cache(const KernelBenchBuild& built);

// The compile step for a plan at one set of the task's shapes: what it runs, may read and may write.
TritonStep kernelbench_triton_step(const KernelBenchPython& python, const KernelBenchBuild& built,
                                   const std::filesystem::path& plan, const TritonShapeSet& shapes,
                                   const TritonBuildOptions& options);

// Runs that step unless a marker says it ran for this plan, these shapes, this GPU model and this Python. Outcomes
// as a Triton candidate's build: failed is Triton's compile error (its message in `log`); a candidate that fails
// when run is ok here, as its worker sees the same failure and reports it; environment_error is not cached.
TritonBuild compile_kernelbench_triton(const KernelBenchPython& python, const KernelBenchBuild& built,
                                       const std::filesystem::path& plan, const TritonShapeSet& shapes,
                                       const TritonBuildOptions& options);

}  // namespace crucible::eval

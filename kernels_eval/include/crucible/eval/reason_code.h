#pragma once
// Why a verdict is what it is, as a value: compared and switched on inside the process, and written by its name (one
// table, reason_code.cpp) only where a verdict leaves it as text (JSON records, the command line).
#include <optional>
#include <string>
#include <string_view>

namespace crucible::eval {

enum class ReasonCode {
  // Compiling (docs/evaluation.md, "Stages").
  source_too_large, compile_timeout, compiler_error, compile_environment, triton_unavailable,
  // The static gate of a native candidate's shared object.
  forbidden_import, forbidden_export, missing_entry_point, malformed_binary, binary_too_large,
  // The static gate of a Triton candidate's source.
  torch_compute, tensor_subclass, no_triton_kernel, unlaunched_kernel, forbidden_decorator, cross_call_state,
  exception_fallback, side_stream, monkeypatch, dynamic_code, harness_reach, precision_downgrade, syntax_error,
  // The static gate and extraction of a KernelBench candidate (docs/kernelbench.md), and what its worker refuses.
  missing_model_new, no_custom_kernel, foreign_class, forward_state, reference_model, dynamic_source,
  duplicate_extension, needs_gpu, kernelbench_unavailable, missing_parameter, parameter_shape, no_custom_work,
  output_count, output_type, output_shape, python_exception,
  // Loading and calling the candidate in its worker.
  load_failed, nonzero_return, crash, forbidden_syscall, wall_timeout, cpu_time_limit, worker_lost, unsealed,
  evaluation_budget, out_of_memory, cuda_error,
  // Correctness and timing.
  input_mutated, out_of_bounds_write, output_unwritten, nondeterministic, nan, mismatch, foreign_kernels,
  skipped_work, timing_noisy,
  timing_tampered,  // no longer given; read from records of older runs
  // Reached without evaluating: the policy's failure, or the evaluator's own.
  policy_error, no_source, evaluator_error,
  // A name this build does not know, read from a record (a later version's); the detail keeps the name.
  unrecognized,
};

std::string_view reason_code_name(ReasonCode code);
// The code of a name reason_code_name gives; none for any other text.
std::optional<ReasonCode> parse_reason_code(std::string_view name);

}  // namespace crucible::eval

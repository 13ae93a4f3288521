#include "crucible/eval/reason_code.h"

#include "name_table.h"

namespace crucible::eval {
namespace {

using C = ReasonCode;
// The names records have always carried: a name, once written, never changes (old runs must still read).
constexpr NameTable<ReasonCode, 64> kNames{{
    {C::source_too_large, "source_too_large"},
    {C::compile_timeout, "compile_timeout"},
    {C::compiler_error, "compiler_error"},
    {C::compile_environment, "compile_environment"},
    {C::triton_unavailable, "triton_unavailable"},
    {C::forbidden_import, "forbidden_import"},
    {C::forbidden_export, "forbidden_export"},
    {C::missing_entry_point, "missing_entry_point"},
    {C::malformed_binary, "malformed_binary"},
    {C::binary_too_large, "binary_too_large"},
    {C::torch_compute, "torch_compute"},
    {C::tensor_subclass, "tensor_subclass"},
    {C::no_triton_kernel, "no_triton_kernel"},
    {C::unlaunched_kernel, "unlaunched_kernel"},
    {C::forbidden_decorator, "forbidden_decorator"},
    {C::cross_call_state, "cross_call_state"},
    {C::exception_fallback, "exception_fallback"},
    {C::side_stream, "side_stream"},
    {C::monkeypatch, "monkeypatch"},
    {C::dynamic_code, "dynamic_code"},
    {C::harness_reach, "harness_reach"},
    {C::precision_downgrade, "precision_downgrade"},
    {C::syntax_error, "syntax_error"},
    {C::missing_model_new, "missing_model_new"},
    {C::no_custom_kernel, "no_custom_kernel"},
    {C::foreign_class, "foreign_class"},
    {C::forward_state, "forward_state"},
    {C::reference_model, "reference_model"},
    {C::dynamic_source, "dynamic_source"},
    {C::duplicate_extension, "duplicate_extension"},
    {C::needs_gpu, "needs_gpu"},
    {C::kernelbench_unavailable, "kernelbench_unavailable"},
    {C::missing_parameter, "missing_parameter"},
    {C::parameter_shape, "parameter_shape"},
    {C::no_custom_work, "no_custom_work"},
    {C::output_count, "output_count"},
    {C::output_type, "output_type"},
    {C::output_shape, "output_shape"},
    {C::python_exception, "python_exception"},
    {C::load_failed, "load_failed"},
    {C::nonzero_return, "nonzero_return"},
    {C::crash, "crash"},
    {C::forbidden_syscall, "forbidden_syscall"},
    {C::wall_timeout, "wall_timeout"},
    {C::cpu_time_limit, "cpu_time_limit"},
    {C::worker_lost, "worker_lost"},
    {C::unsealed, "unsealed"},
    {C::evaluation_budget, "evaluation_budget"},
    {C::out_of_memory, "out_of_memory"},
    {C::cuda_error, "cuda_error"},
    {C::input_mutated, "input_mutated"},
    {C::out_of_bounds_write, "out_of_bounds_write"},
    {C::output_unwritten, "output_unwritten"},
    {C::nondeterministic, "nondeterministic"},
    {C::nan, "nan"},
    {C::mismatch, "mismatch"},
    {C::foreign_kernels, "foreign_kernels"},
    {C::skipped_work, "skipped_work"},
    {C::timing_noisy, "timing_noisy"},
    {C::timing_tampered, "timing_tampered"},
    {C::policy_error, "policy_error"},
    {C::no_source, "no_source"},
    {C::evaluator_error, "evaluator_error"},
    {C::unrecognized, "unrecognized"},
}};

}  // namespace

std::string_view reason_code_name(ReasonCode code) { return name_in(kNames, code); }

std::optional<ReasonCode> parse_reason_code(std::string_view name) { return value_in(kNames, name); }

}  // namespace crucible::eval

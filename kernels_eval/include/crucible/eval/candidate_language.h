#pragma once
// What a policy writes candidates in: the run's backend and candidate kind as one value. Prompts, code fences,
// kernel templates and snapshots decide by it; its name is candidate_language's (device.h: one table of names).
#include <string_view>

#include "crucible/eval/device.h"

namespace crucible::eval {

struct CandidateLanguage {
  Backend backend = Backend::cpu;
  CandidateKind kind = CandidateKind::native;

  static CandidateLanguage cpp() { return {Backend::cpu, CandidateKind::native}; }
  static CandidateLanguage cuda_cpp() { return {Backend::cuda, CandidateKind::native}; }
  static CandidateLanguage triton() { return {Backend::cuda, CandidateKind::triton}; }

  // "cpu" (C++), "cuda" (CUDA C++), "triton" or "kernelbench".
  std::string_view name() const { return candidate_language(backend, kind); }
  bool is_cuda_cpp() const { return kind == CandidateKind::native && backend == Backend::cuda; }
  // Triton and KernelBench candidates are Python files; native ones C++ or CUDA C++.
  bool is_python() const { return kind != CandidateKind::native; }

  friend bool operator==(const CandidateLanguage& a, const CandidateLanguage& b) {
    return a.backend == b.backend && a.kind == b.kind;
  }
  friend bool operator!=(const CandidateLanguage& a, const CandidateLanguage& b) { return !(a == b); }
};

}  // namespace crucible::eval

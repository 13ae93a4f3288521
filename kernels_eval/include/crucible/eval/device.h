#pragma once
// Where a candidate runs, parsed once from its text ("cpu", "cuda:N") and passed on as a value.
#include <stdexcept>
#include <string>
#include <string_view>

namespace crucible::eval {

// What a candidate is written for: C++ on the CPU, or CUDA C++.
enum class Backend { cpu, cuda };

std::string_view backend_name(Backend backend);
// "cpu" or "cuda"; throws std::invalid_argument otherwise.
Backend parse_backend(std::string_view text);
// What a candidate is written in. Native: C++ (CPU) or CUDA C++, by the backend; triton: Python with Triton kernels,
// on a GPU only; kernelbench: KernelBench's answer format, a Python file defining ModelNew whose kernels come from
// load_inline (CPU and GPU) or @triton.jit (GPU). A kind's names and file extension are one row of a table
// (device.cpp).
enum class CandidateKind { native, triton, kernelbench };

std::string_view candidate_kind_name(CandidateKind kind);
// A kind's name ("native", "triton", "kernelbench"); throws std::invalid_argument naming the known ones otherwise.
CandidateKind parse_candidate_kind(std::string_view text);

// The file extension of a candidate's source: "cpp", "cu", or "py" for Triton and KernelBench.
std::string_view source_extension(Backend backend, CandidateKind kind = CandidateKind::native);
// What policies write candidates in, as prompts and kernel templates name it: "cpu" (C++), "cuda" (CUDA C++), or the
// kind's own name ("triton").
std::string_view candidate_language(Backend backend, CandidateKind kind);

struct Device {
  Backend backend = Backend::cpu;
  int index = 0;  // the GPU's ordinal; 0 on the CPU

  static Device cpu() { return {}; }
  static Device cuda(int ordinal) { return {Backend::cuda, ordinal}; }
  bool is_cuda() const { return backend == Backend::cuda; }
  std::string name() const;  // "cpu" or "cuda:N"

  friend bool operator==(const Device& a, const Device& b) { return a.backend == b.backend && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend bool operator<(const Device& a, const Device& b) {
    return a.backend != b.backend ? a.backend < b.backend : a.index < b.index;
  }
};

// "cpu" or "cuda:N" (N a decimal ordinal); with `allow_bare_cuda`, "cuda" too, meaning cuda:0 (the eval CLI's
// shorthand). Throws std::invalid_argument naming the text otherwise.
Device parse_device(std::string_view text, bool allow_bare_cuda = false);

}  // namespace crucible::eval

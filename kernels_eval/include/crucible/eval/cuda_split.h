#pragma once
// Splits a CUDA candidate into parts that compile apart, so that no per-candidate compile parses the CUDA runtime's
// host headers through nvcc's host chain (0.8 s of a 1.2 s compile):
//  - host code for g++: bodies of device-only functions dropped (their declarations stay, so g++ names each
//    launched kernel exactly as the device compiler does), `k<<<grid, block, smem, stream>>>(args)` rewritten into
//    `::crucible_fast::launch(k, grid, block, smem, stream)(args)` (crucible/fast_launch.h);
//  - device code for NVRTC: host function definitions dropped, host-only headers replaced by a few definitions.
// It reads the source as tokens, not as C++: anything it is not sure of (constant memory, __device__ variables,
// launches inside macros, kernel-pointer APIs it does not translate) is refused with a reason, and the compiler then
// takes a path that needs no split. A refusal is never a verdict on the candidate.
#include <string>
#include <vector>

namespace crucible::eval {

struct CudaSplit {
  std::string host;            // empty when refused
  std::string host_refusal;    // why not, when refused
  std::string device;          // NVRTC's translation unit; empty when refused
  std::string device_refusal;  // why not, when refused
  // Template kernels: NVRTC builds only the instances named to it, so the host half's references name them
  // (cuda_split_build.cpp adds explicit instantiations to `device`).
  std::vector<std::string> template_kernels;
  bool host_ok() const { return host_refusal.empty(); }
  bool device_ok() const { return device_refusal.empty(); }
};

CudaSplit split_cuda_source(const std::string& source);

// A kernel's mangled name with every anonymous namespace spelled the same: g++ writes `12_GLOBAL__N_1`, nvcc and
// NVRTC a name made from the file. Two kernels match when their keys are equal.
std::string kernel_match_key(const std::string& mangled);

}  // namespace crucible::eval

#pragma once
// 64 distinct CUDA candidates for the relu task, as a best-of-N sweep would produce them: every combination of
// block size (64..512), elements per thread (1..8) and memory access (scalar, float2, float4, float4 with
// streaming cache hints). All are correct for any element count.
#include <string>

namespace crucible::bench {

inline std::string relu_variant(int i) {
  const int block = 64 << (i % 4), per_thread = 1 << ((i / 4) % 4), access = (i / 16) % 4;
  const int vec = access == 0 ? 1 : access == 1 ? 2 : 4;
  const char* load = access == 3 ? "__ldcs" : "*";
  std::string vtype = vec == 1 ? "float" : vec == 2 ? "float2" : "float4";
  std::string body;
  if (vec == 1) {
    body = "      float v = " + std::string(load) + "(x + i); y[i] = v > 0.f ? v : 0.f;\n";
  } else {
    body = "      " + vtype + " v = " + std::string(load) + "(reinterpret_cast<const " + vtype + "*>(x) + i);\n"
           "      v.x = v.x > 0.f ? v.x : 0.f; v.y = v.y > 0.f ? v.y : 0.f;\n" +
           (vec == 4 ? std::string("      v.z = v.z > 0.f ? v.z : 0.f; v.w = v.w > 0.f ? v.w : 0.f;\n") : "") +
           "      reinterpret_cast<" + vtype + "*>(y)[i] = v;\n";
  }
  return "// relu sweep variant " + std::to_string(i) + ": block " + std::to_string(block) + ", " +
         std::to_string(per_thread) + " per thread, vector width " + std::to_string(vec) +
         (access == 3 ? ", streaming loads" : "") + "\n"
         "#include <crucible/kernel.h>\n#include <cuda_runtime.h>\n"
         "constexpr int kBlock = " + std::to_string(block) + ", kPerThread = " + std::to_string(per_thread) +
         ", kVec = " + std::to_string(vec) + ";\n"
         "__global__ void relu_vec(const float* __restrict__ x, float* __restrict__ y, long nvec) {\n"
         "  long base = (long)blockIdx.x * kBlock * kPerThread + threadIdx.x;\n"
         "#pragma unroll\n"
         "  for (int u = 0; u < kPerThread; ++u) {\n"
         "    long i = base + (long)u * kBlock;\n"
         "    if (i < nvec) {\n" + body + "    }\n  }\n}\n"
         "__global__ void relu_tail(const float* x, float* y, long start, long n) {\n"
         "  long i = start + (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* s) {\n"
         "  long n = 1;\n  for (int d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;\n"
         "  cudaStream_t stream = (cudaStream_t)s;\n"
         "  long nvec = n / kVec, per_block = (long)kBlock * kPerThread;\n"
         "  if (nvec > 0) relu_vec<<<(unsigned)((nvec + per_block - 1) / per_block), kBlock, 0, stream>>>(x, y, nvec);\n"
         "  long rest = n - nvec * kVec;\n"
         "  if (rest > 0) relu_tail<<<(unsigned)((rest + 255) / 256), 256, 0, stream>>>(x, y, nvec * kVec, n);\n"
         "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n";
}

}  // namespace crucible::bench

#pragma once
// Distinct CUDA candidates for a one-input elementwise task, as a best-of-N sweep would produce them: every
// combination of block size (64..512), elements per thread (1..8) and memory access (scalar, float2, float4, float4
// with streaming cache hints), 64 in all. All are correct for any element count. `op` is the float expression of
// one element `v` (for example "v > 0.f ? v : 0.f").
#include <string>

namespace crucible::bench {

struct ElementwiseOp {
  std::string name;  // used in the kernel's comment only
  std::string expr;  // of a float `v`
};

inline std::string elementwise_variant(const ElementwiseOp& op, int i) {
  const int block = 64 << (i % 4), per_thread = 1 << ((i / 4) % 4), access = (i / 16) % 4;
  const int vec = access == 0 ? 1 : access == 1 ? 2 : 4;
  const std::string load = access == 3 ? "__ldcs" : "*";
  const std::string vtype = vec == 1 ? "float" : vec == 2 ? "float2" : "float4";
  std::string body;
  if (vec == 1) {
    body = "      y[i] = apply(" + load + "(x + i));\n";
  } else {
    body = "      " + vtype + " w = " + load + "(reinterpret_cast<const " + vtype + "*>(x) + i);\n"
           "      w.x = apply(w.x); w.y = apply(w.y);\n" +
           (vec == 4 ? std::string("      w.z = apply(w.z); w.w = apply(w.w);\n") : "") +
           "      reinterpret_cast<" + vtype + "*>(y)[i] = w;\n";
  }
  return "// " + op.name + " sweep variant " + std::to_string(i) + ": block " + std::to_string(block) + ", " +
         std::to_string(per_thread) + " per thread, vector width " + std::to_string(vec) +
         (access == 3 ? ", streaming loads" : "") + "\n"
         "#include <crucible/kernel.h>\n#include <cuda_runtime.h>\n"
         "constexpr int kBlock = " + std::to_string(block) + ", kPerThread = " + std::to_string(per_thread) +
         ", kVec = " + std::to_string(vec) + ";\n"
         "__device__ __forceinline__ float apply(float v) { return " + op.expr + "; }\n"
         "__global__ void map_vec(const float* __restrict__ x, float* __restrict__ y, long nvec) {\n"
         "  long base = (long)blockIdx.x * kBlock * kPerThread + threadIdx.x;\n"
         "#pragma unroll\n"
         "  for (int u = 0; u < kPerThread; ++u) {\n"
         "    long i = base + (long)u * kBlock;\n"
         "    if (i < nvec) {\n" + body + "    }\n  }\n}\n"
         "__global__ void map_tail(const float* x, float* y, long start, long n) {\n"
         "  long i = start + (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) y[i] = apply(x[i]);\n}\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* s) {\n"
         "  long n = 1;\n  for (int d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;\n"
         "  cudaStream_t stream = (cudaStream_t)s;\n"
         "  long nvec = n / kVec, per_block = (long)kBlock * kPerThread;\n"
         "  if (nvec > 0) map_vec<<<(unsigned)((nvec + per_block - 1) / per_block), kBlock, 0, stream>>>(x, y, nvec);\n"
         "  long rest = n - nvec * kVec;\n"
         "  if (rest > 0) map_tail<<<(unsigned)((rest + 255) / 256), 256, 0, stream>>>(x, y, nvec * kVec, n);\n"
         "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n";
}

}  // namespace crucible::bench

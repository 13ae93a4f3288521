#include "policy/kernel_templates.h"

#include <string>

namespace crucible::policy {
namespace {

std::string num(int v) { return std::to_string(v); }

// Elementwise: the work split into blocks of `block` elements, each processed `unroll` at a time.
std::string elementwise(const std::string& expression, const std::vector<int>& v) {
  const int block = v[0], unroll = v[1];
  return "// search policy: elementwise, block " + num(block) + ", unroll " + num(unroll) +
         "\n#include <crucible/kernel.h>\n#include <cmath>\n"
         "static inline float op(float v) { return " + expression + "; }\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
         "  const float* x = static_cast<const float*>(in[0].data);\n"
         "  float* y = static_cast<float*>(out[0].data);\n"
         "  int64_t n = 1;\n  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  constexpr int64_t kBlock = " + num(block) + ", kUnroll = " + num(unroll) + ";\n"
         "  for (int64_t start = 0; start < n; start += kBlock) {\n"
         "    const int64_t end = start + kBlock < n ? start + kBlock : n;\n"
         "    int64_t i = start;\n"
         "    for (; i + kUnroll <= end; i += kUnroll)\n"
         "#pragma GCC unroll 8\n"
         "      for (int64_t u = 0; u < kUnroll; ++u) y[i + u] = op(x[i + u]);\n"
         "    for (; i < end; ++i) y[i] = op(x[i]);\n"
         "  }\n  return 0;\n}\n";
}

std::string relu(const eval::TaskSpec&, const std::vector<int>& v) { return elementwise("v > 0.0f ? v : 0.0f", v); }

std::string gelu(const eval::TaskSpec&, const std::vector<int>& v) {
  return elementwise("static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)))", v);
}

// C[M,N] = A[M,K] B[K,N], tiled over i, j and k; `order` 0 runs k outside j within a tile (streaming rows of B),
// 1 runs j outside k (a dot product per output).
std::string matmul(const eval::TaskSpec&, const std::vector<int>& v) {
  const int ti = v[0], tj = v[1], tk = v[2], order = v[3];
  std::string inner = order == 0
                          ? "          for (int64_t i = i0; i < i1; ++i)\n"
                            "            for (int64_t p = p0; p < p1; ++p) {\n"
                            "              const float a = A[i * K + p];\n"
                            "              for (int64_t j = j0; j < j1; ++j) C[i * N + j] += a * B[p * N + j];\n"
                            "            }\n"
                          : "          for (int64_t i = i0; i < i1; ++i)\n"
                            "            for (int64_t j = j0; j < j1; ++j) {\n"
                            "              float acc = 0.0f;\n"
                            "              for (int64_t p = p0; p < p1; ++p) acc += A[i * K + p] * B[p * N + j];\n"
                            "              C[i * N + j] += acc;\n"
                            "            }\n";
  return "// search policy: matmul, tiles " + num(ti) + "x" + num(tj) + "x" + num(tk) + ", order " + num(order) +
         "\n#include <crucible/kernel.h>\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
         "  const float* A = static_cast<const float*>(in[0].data);\n"
         "  const float* B = static_cast<const float*>(in[1].data);\n"
         "  float* C = static_cast<float*>(out[0].data);\n"
         "  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];\n"
         "  constexpr int64_t TI = " + num(ti) + ", TJ = " + num(tj) + ", TK = " + num(tk) + ";\n"
         "  for (int64_t i = 0; i < M * N; ++i) C[i] = 0.0f;\n"
         "  for (int64_t i0 = 0; i0 < M; i0 += TI) {\n"
         "    const int64_t i1 = i0 + TI < M ? i0 + TI : M;\n"
         "    for (int64_t j0 = 0; j0 < N; j0 += TJ) {\n"
         "      const int64_t j1 = j0 + TJ < N ? j0 + TJ : N;\n"
         "      for (int64_t p0 = 0; p0 < K; p0 += TK) {\n"
         "        const int64_t p1 = p0 + TK < K ? p0 + TK : K;\n" + inner +
         "      }\n    }\n  }\n  return 0;\n}\n";
}

const KernelTemplate kRelu{"relu", {{"block", {64, 256, 1024, 4096}}, {"unroll", {1, 2, 4, 8}}}, relu};
const KernelTemplate kGelu{"gelu", {{"block", {64, 256, 1024, 4096}}, {"unroll", {1, 2, 4, 8}}}, gelu};
const KernelTemplate kMatmul{"matmul",
                             {{"tile_i", {4, 16, 64}}, {"tile_j", {16, 64, 256}}, {"tile_k", {16, 64, 256}},
                              {"order", {0, 1}}},
                             matmul};

}  // namespace

const KernelTemplate* template_for(const eval::TaskSpec& task) {
  if (task.reference == "relu") return &kRelu;
  if (task.reference == "gelu") return &kGelu;
  if (task.reference == "matmul") return &kMatmul;
  return nullptr;
}

}  // namespace crucible::policy

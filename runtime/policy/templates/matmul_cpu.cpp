// CPU matmul template: C[M,N] = A[M,K] B[K,N], tiled over i, j and k. `order` 0 runs k outside j within a tile
// (streaming rows of B, vectorisable over j); 1 runs j outside k (a dot product per output).
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

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
  return banner("matmul (cpu)", {"tile_i", "tile_j", "tile_k", "order"}, v) +
         "#include <crucible/kernel.h>\n"
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

const KernelTemplate kMatmul{"matmul",
                             {{"tile_i", {4, 16, 64}}, {"tile_j", {16, 64, 256}}, {"tile_k", {16, 64, 256}},
                              {"order", {0, 1}}},
                             matmul};

}  // namespace

std::vector<const KernelTemplate*> matmul_cpu() { return {&kMatmul}; }

}  // namespace crucible::policy::templates

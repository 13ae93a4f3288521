// CUDA matmul template: c (M x N) = a (M x K) @ b (K x N), row-major, through shared memory. A block of
// block x block threads computes a tile of (block * work) x (block * work) outputs, each thread work x work of them
// (rows ty + i * block, columns tx + j * block, so that neighbouring threads read neighbouring shared words and
// write neighbouring outputs), stepping over k in slices of tile_k staged in shared memory (a's slice transposed).
// Out-of-range rows, columns and k are read as zeros and never written; the grid strides over the tiles.
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

std::string matmul(const eval::TaskSpec&, const std::vector<int>& v) {
  const int block = v[0], work = v[1], tile_k = v[2];
  return banner("matmul (cuda)", {"block", "work", "tile_k"}, v) + cuda_prelude() +
         "constexpr int kBlock = " + num(block) + ", kWork = " + num(work) + ", kTileK = " + num(tile_k) + ";\n"
         "constexpr int kTile = kBlock * kWork, kThreads = kBlock * kBlock;\n\n"
         "__global__ void __launch_bounds__(kThreads)\n"
         "matmul_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,\n"
         "              int64_t M, int64_t N, int64_t K) {\n"
         "  __shared__ float as[kTileK][kTile];  // as[k][m]: a's slice, transposed\n"
         "  __shared__ float bs[kTileK][kTile];  // bs[k][n]\n"
         "  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kBlock + tx;\n"
         "  const int64_t tiles_m = (M + kTile - 1) / kTile, tiles_n = (N + kTile - 1) / kTile;\n"
         "  for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {\n"
         "    for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {\n"
         "      const int64_t m0 = tm * kTile, n0 = tn * kTile;\n"
         "      float acc[kWork][kWork];\n"
         "#pragma unroll\n"
         "      for (int i = 0; i < kWork; ++i)\n"
         "#pragma unroll\n"
         "        for (int j = 0; j < kWork; ++j) acc[i][j] = 0.0f;\n"
         "      for (int64_t k0 = 0; k0 < K; k0 += kTileK) {\n"
         "        for (int e = tid; e < kTile * kTileK; e += kThreads) {\n"
         "          const int m = e / kTileK, k = e % kTileK;\n"
         "          const int64_t gm = m0 + m, gk = k0 + k;\n"
         "          as[k][m] = gm < M && gk < K ? a[gm * K + gk] : 0.0f;\n"
         "        }\n"
         "        for (int e = tid; e < kTileK * kTile; e += kThreads) {\n"
         "          const int k = e / kTile, n = e % kTile;\n"
         "          const int64_t gk = k0 + k, gn = n0 + n;\n"
         "          bs[k][n] = gk < K && gn < N ? b[gk * N + gn] : 0.0f;\n"
         "        }\n"
         "        __syncthreads();\n"
         "#pragma unroll\n"
         "        for (int k = 0; k < kTileK; ++k) {\n"
         "          float ar[kWork], br[kWork];\n"
         "#pragma unroll\n"
         "          for (int i = 0; i < kWork; ++i) ar[i] = as[k][ty + i * kBlock];\n"
         "#pragma unroll\n"
         "          for (int j = 0; j < kWork; ++j) br[j] = bs[k][tx + j * kBlock];\n"
         "#pragma unroll\n"
         "          for (int i = 0; i < kWork; ++i)\n"
         "#pragma unroll\n"
         "            for (int j = 0; j < kWork; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);\n"
         "        }\n"
         "        __syncthreads();\n"
         "      }\n"
         "#pragma unroll\n"
         "      for (int i = 0; i < kWork; ++i) {\n"
         "        const int64_t row = m0 + ty + i * kBlock;\n"
         "#pragma unroll\n"
         "        for (int j = 0; j < kWork; ++j) {\n"
         "          const int64_t col = n0 + tx + j * kBlock;\n"
         "          if (row < M && col < N) c[row * N + col] = acc[i][j];\n"
         "        }\n"
         "      }\n"
         "    }\n"
         "  }\n"
         "}\n\n"
         "}  // namespace\n\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, "
         "void* stream) {\n"
         "  const int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];\n"
         "  if (M <= 0 || N <= 0) return 0;  // K == 0 still writes zeros\n"
         "  const int64_t tiles_m = (M + kTile - 1) / kTile, tiles_n = (N + kTile - 1) / kTile;\n"
         "  const dim3 grid(static_cast<unsigned>(tiles_n < 2147483647 ? tiles_n : 2147483647),\n"
         "                  static_cast<unsigned>(tiles_m < 65535 ? tiles_m : 65535));\n"
         "  matmul_kernel<<<grid, dim3(kBlock, kBlock), 0, static_cast<cudaStream_t>(stream)>>>(\n"
         "      static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data),\n"
         "      static_cast<float*>(out[0].data), M, N, K);\n"
         "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n"
         "}\n";
}

const KernelTemplate kMatmul{"matmul", {{"block", {8, 16}}, {"work", {1, 2, 4, 8}}, {"tile_k", {8, 16, 32}}}, matmul};

}  // namespace

std::vector<const KernelTemplate*> matmul_cuda() { return {&kMatmul}; }

}  // namespace crucible::policy::templates

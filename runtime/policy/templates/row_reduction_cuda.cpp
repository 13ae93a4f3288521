// CUDA row-reduction templates (softmax, rmsnorm over the last dimension). What the knobs change:
//   threads_per_row  32: one warp per row (8 rows per 256-thread block, shuffles only); 128: two rows per block;
//                    512 or 1024: one block per row (warp shuffles, then the warps' partials through shared memory)
//   vec              packs of 1, 2 or 4 floats per load and store (scalar when the row length or a pointer does
//                    not allow it), the last cols % vec elements scalar
//   unroll           packs each thread loads before using them (loads in flight per thread)
//   strategy         softmax: 0 max | sum of exp | write (three reads of the row); 1 online max and rescaled sum
//                    in one read | write
// Rows are strided over by the grid; every reduction hands every thread of the row the same value.
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

// The online (max, sum) pair reduced over a row: (m, s) stands for s * exp(m), merged at the larger maximum.
const char* kOnlineReduce =
    "__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {\n"
    "  const float top = fmaxf(m, m2);\n"
    "  if (top == -INFINITY) return;  // both empty\n"
    "  s = s * expf(m - top) + s2 * expf(m2 - top);\n"
    "  m = top;\n"
    "}\n\n"
    "__device__ __forceinline__ void row_reduce_online(float& m, float& s, float* sh_m, float* sh_s) {\n"
    "#pragma unroll\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float m2 = __shfl_xor_sync(kFull, m, o), s2 = __shfl_xor_sync(kFull, s, o);\n"
    "    merge(m, s, m2, s2);\n"
    "  }\n"
    "  m = __shfl_sync(kFull, m, 0);\n"
    "  s = __shfl_sync(kFull, s, 0);\n"
    "  if (kRowWarps > 1) {\n"
    "    const int warp = threadIdx.x / 32, first = warp / kRowWarps * kRowWarps;\n"
    "    __syncthreads();\n"
    "    if ((threadIdx.x & 31) == 0) { sh_m[warp] = m; sh_s[warp] = s; }\n"
    "    __syncthreads();\n"
    "    m = sh_m[first];\n"
    "    s = sh_s[first];\n"
    "    for (int k = 1; k < kRowWarps; ++k) merge(m, s, sh_m[first + k], sh_s[first + k]);\n"
    "  }\n"
    "}\n\n";

// Layout constants, group reductions (sum, max, and the online (max, sum) pair) and the row visitors.
// Only what a source uses is emitted (nvcc warns of unreferenced functions).
std::string row_prelude(int threads_per_row, int unroll, bool sum, bool max, bool online) {
  const int rows_per_block = threads_per_row >= 256 ? 1 : 256 / threads_per_row;
  return cuda_prelude() + cuda_aligned_helper() +
         "constexpr int kRowThreads = " + num(threads_per_row) + ", kRowsPerBlock = " + num(rows_per_block) +
         ", kUnroll = " + num(unroll) + ";\n"
         "constexpr int kBlockThreads = kRowThreads * kRowsPerBlock, kWarps = kBlockThreads / 32;\n"
         "constexpr int kRowWarps = kRowThreads / 32;\n"
         "constexpr unsigned kFull = 0xffffffffu;\n\n" +
         (sum ? "struct Sum { __device__ float operator()(float a, float b) const { return a + b; } };\n" : "") +
         (max ? "struct Max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };\n" : "") +
         "\n"
         "// Reduces v over the kRowThreads threads of a row; all of them get lane 0's result of the same order of\n"
         "// operations. Every thread of the block must call it (it synchronises the block when a row spans warps).\n"
         "template <class Op>\n"
         "__device__ __forceinline__ float row_reduce(float v, Op op, float* sh) {\n"
         "#pragma unroll\n"
         "  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));\n"
         "  v = __shfl_sync(kFull, v, 0);\n"
         "  if (kRowWarps > 1) {\n"
         "    const int warp = threadIdx.x / 32, first = warp / kRowWarps * kRowWarps;\n"
         "    __syncthreads();  // earlier readers of sh are done\n"
         "    if ((threadIdx.x & 31) == 0) sh[warp] = v;\n"
         "    __syncthreads();\n"
         "    v = sh[first];\n"
         "    for (int k = 1; k < kRowWarps; ++k) v = op(v, sh[first + k]);\n"
         "  }\n"
         "  return v;\n"
         "}\n\n" +
         (online ? kOnlineReduce : "") +
         "// Calls f(value) on this thread's elements of a row of n floats: packs of V, kUnroll of them loaded\n"
         "// before use, then the scalar tail.\n"
         "template <int V, class F>\n"
         "__device__ __forceinline__ void visit_row(const float* __restrict__ xr, int64_t n, int t, F f) {\n"
         "  typedef typename Pack<V>::type P;\n"
         "  const P* xp = reinterpret_cast<const P*>(xr);\n"
         "  const int64_t packs = n / V;\n"
         "  int64_t p = t;\n"
         "  for (; p + (kUnroll - 1) * kRowThreads < packs; p += kUnroll * kRowThreads) {\n"
         "    P q[kUnroll];\n"
         "#pragma unroll\n"
         "    for (int u = 0; u < kUnroll; ++u) q[u] = xp[p + u * kRowThreads];\n"
         "#pragma unroll\n"
         "    for (int u = 0; u < kUnroll; ++u)\n"
         "#pragma unroll\n"
         "      for (int c = 0; c < V; ++c) f(at(q[u], c));\n"
         "  }\n"
         "  for (; p < packs; p += kRowThreads) {\n"
         "    P q = xp[p];\n"
         "#pragma unroll\n"
         "    for (int c = 0; c < V; ++c) f(at(q, c));\n"
         "  }\n"
         "  for (int64_t j = packs * V + t; j < n; j += kRowThreads) f(xr[j]);\n"
         "}\n\n"
         "// yr[j] = g(xr[j], wr[j]) over this thread's elements (wr unread, and 0 passed, when W is false).\n"
         "template <int V, bool W, class G>\n"
         "__device__ __forceinline__ void map_row(const float* __restrict__ xr, const float* __restrict__ wr,\n"
         "                                        float* __restrict__ yr, int64_t n, int t, G g) {\n"
         "  typedef typename Pack<V>::type P;\n"
         "  const P* xp = reinterpret_cast<const P*>(xr);\n"
         "  const P* wp = reinterpret_cast<const P*>(wr);\n"
         "  P* yp = reinterpret_cast<P*>(yr);\n"
         "  const int64_t packs = n / V;\n"
         "  int64_t p = t;\n"
         "  for (; p + (kUnroll - 1) * kRowThreads < packs; p += kUnroll * kRowThreads) {\n"
         "    P q[kUnroll], w[kUnroll];\n"
         "#pragma unroll\n"
         "    for (int u = 0; u < kUnroll; ++u) {\n"
         "      q[u] = xp[p + u * kRowThreads];\n"
         "      if (W) w[u] = wp[p + u * kRowThreads];\n"
         "    }\n"
         "#pragma unroll\n"
         "    for (int u = 0; u < kUnroll; ++u) {\n"
         "#pragma unroll\n"
         "      for (int c = 0; c < V; ++c) at(q[u], c) = g(at(q[u], c), W ? at(w[u], c) : 0.0f);\n"
         "      yp[p + u * kRowThreads] = q[u];\n"
         "    }\n"
         "  }\n"
         "  for (; p < packs; p += kRowThreads) {\n"
         "    P q = xp[p], w;\n"
         "    if (W) w = wp[p];\n"
         "#pragma unroll\n"
         "    for (int c = 0; c < V; ++c) at(q, c) = g(at(q, c), W ? at(w, c) : 0.0f);\n"
         "    yp[p] = q;\n"
         "  }\n"
         "  for (int64_t j = packs * V + t; j < n; j += kRowThreads) yr[j] = g(xr[j], W ? wr[j] : 0.0f);\n"
         "}\n\n";
}

// The row loop of a kernel: uniform over the block (rows past the end do no work but still synchronise).
const char* kRowLoop =
    "  const int group = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;\n"
    "  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; r0 < rows;\n"
    "       r0 += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {\n"
    "    const int64_t row = r0 + group;\n"
    "    const int64_t n = row < rows ? cols : 0;\n"
    "    const float* xr = x + (row < rows ? row : 0) * cols;\n"
    "    float* yr = y + (row < rows ? row : 0) * cols;\n";

// The host side: the vector width the pointers and the row length allow, and a grid over the rows.
std::string entry(int vec, const std::string& inputs, const std::string& args, const std::string& aligned_check) {
  return "}  // namespace\n\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, "
         "void* stream) {\n" + inputs +
         "  const int32_t nd = in[0].ndim;\n"
         "  const int64_t cols = nd > 0 ? in[0].shape[nd - 1] : 1;\n"
         "  int64_t rows = 1;\n"
         "  for (int32_t d = 0; d + 1 < nd; ++d) rows *= in[0].shape[d];\n"
         "  if (rows <= 0 || cols <= 0) return 0;\n"
         "  int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;\n"
         "  if (blocks > 2147483647) blocks = 2147483647;\n"
         "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n"
         "  constexpr int kVec = " + num(vec) + ";\n"
         "  if (kVec > 1 && cols % kVec == 0 && " + aligned_check + ")\n"
         "    row_kernel<kVec><<<static_cast<unsigned>(blocks), kBlockThreads, 0, s>>>(" + args + ");\n"
         "  else\n"
         "    row_kernel<1><<<static_cast<unsigned>(blocks), kBlockThreads, 0, s>>>(" + args + ");\n"
         "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n"
         "}\n";
}

std::string softmax(const eval::TaskSpec&, const std::vector<int>& v) {
  const int threads_per_row = v[0], vec = v[1], unroll = v[2], strategy = v[3];
  std::string s = banner("softmax (cuda)", {"threads_per_row", "vec", "unroll", "strategy"}, v) +
                  row_prelude(threads_per_row, unroll, strategy == 0, strategy == 0, strategy == 1) +
                  "template <int V>\n"
                  "__global__ void __launch_bounds__(kBlockThreads)\n"
                  "row_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {\n"
                  "  __shared__ float sh_m[kWarps], sh_s[kWarps];\n" + kRowLoop;
  if (strategy == 0)
    s += "    float m = -INFINITY;\n"
         "    visit_row<V>(xr, n, t, [&](float e) { m = fmaxf(m, e); });\n"
         "    m = row_reduce(m, Max(), sh_m);\n"
         "    float sum = 0.0f;\n"
         "    visit_row<V>(xr, n, t, [&](float e) { sum += expf(e - m); });\n"
         "    sum = row_reduce(sum, Sum(), sh_s);\n";
  else
    s += "    float m = -INFINITY, sum = 0.0f;\n"
         "    visit_row<V>(xr, n, t, [&](float e) {\n"
         "      if (e > m) {\n"
         "        sum = sum * expf(m - e) + 1.0f;\n"
         "        m = e;\n"
         "      } else {\n"
         "        sum += expf(e - m);\n"
         "      }\n"
         "    });\n"
         "    row_reduce_online(m, sum, sh_m, sh_s);\n";
  s += "    const float inv = 1.0f / sum;\n"
       "    map_row<V, false>(xr, nullptr, yr, n, t, [&](float e, float) { return expf(e - m) * inv; });\n"
       "  }\n}\n\n";
  return s + entry(vec,
                   "  const float* x = static_cast<const float*>(in[0].data);\n"
                   "  float* y = static_cast<float*>(out[0].data);\n",
                   "x, y, rows, cols", "aligned(kVec, x, y)");
}

std::string rmsnorm(const eval::TaskSpec& task, const std::vector<int>& v) {
  const int threads_per_row = v[0], vec = v[1], unroll = v[2];
  std::string s = banner("rmsnorm (cuda)", {"threads_per_row", "vec", "unroll"}, v) +
                  row_prelude(threads_per_row, unroll, true, false, false) +
                  "constexpr float kEps = " + float_literal(param(task, "eps", 1e-6)) + ";\n\n"
                  "template <int V>\n"
                  "__global__ void __launch_bounds__(kBlockThreads)\n"
                  "row_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,\n"
                  "           int64_t rows, int64_t cols) {\n"
                  "  __shared__ float sh[kWarps];\n" + kRowLoop +
                  "    float sq = 0.0f;\n"
                  "    visit_row<V>(xr, n, t, [&](float e) { sq += e * e; });\n"
                  "    sq = row_reduce(sq, Sum(), sh);\n"
                  "    const float inv = 1.0f / sqrtf(sq / static_cast<float>(cols) + kEps);\n"
                  "    map_row<V, true>(xr, w, yr, n, t, [&](float e, float g) { return e * inv * g; });\n"
                  "  }\n}\n\n";
  return s + entry(vec,
                   "  const float* x = static_cast<const float*>(in[0].data);\n"
                   "  const float* w = static_cast<const float*>(in[1].data);\n"
                   "  float* y = static_cast<float*>(out[0].data);\n",
                   "x, w, y, rows, cols", "aligned(kVec, x, y, w)");
}

const KernelTemplate kSoftmax{"softmax",
                              {{"threads_per_row", {32, 128, 512, 1024}},
                               {"vec", {1, 2, 4}},
                               {"unroll", {1, 2, 4}},
                               {"strategy", {0, 1}}},
                              softmax};
const KernelTemplate kRmsnorm{
    "rmsnorm", {{"threads_per_row", {32, 128, 512, 1024}}, {"vec", {1, 2, 4}}, {"unroll", {1, 2, 4}}}, rmsnorm};

}  // namespace

std::vector<const KernelTemplate*> row_reduction_cuda() { return {&kSoftmax, &kRmsnorm}; }

}  // namespace crucible::policy::templates

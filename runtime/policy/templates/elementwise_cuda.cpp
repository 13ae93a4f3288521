// CUDA elementwise templates (relu, gelu). The flat index space is read in packs of `vec` floats (float, float2,
// float4; the scalar path when a pointer is misaligned), each thread handling `per_thread` packs of a block's chunk
// (kept in registers between the loads and the stores, coalesced across the block), with the last n % vec elements
// done by block 0. `grid_stride` 0 launches a block per chunk; 1 launches one wave of resident blocks (the SM count
// times the blocks that fit on one) that stride over the chunks. 64-bit indices throughout.
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

const std::vector<std::string> kNames{"threads", "vec", "per_thread", "grid_stride"};

std::string elementwise(const std::string& family, const std::string& expression, const std::vector<int>& v) {
  const int threads = v[0], vec = v[1], per_thread = v[2], grid_stride = v[3];
  return banner(family, kNames, v) + cuda_prelude() + cuda_aligned_helper() +
         "constexpr int kThreads = " + num(threads) + ", kPerThread = " + num(per_thread) + ";\n"
         "constexpr bool kGridStride = " + (grid_stride ? "true" : "false") + ";\n\n"
         "__device__ __forceinline__ float op(float v) { return " + expression + "; }\n\n"
         "template <int V>\n"
         "__global__ void __launch_bounds__(kThreads) elementwise_kernel(const float* __restrict__ x,\n"
         "                                                                float* __restrict__ y, int64_t n) {\n"
         "  typedef typename Pack<V>::type P;\n"
         "  const P* xp = reinterpret_cast<const P*>(x);\n"
         "  P* yp = reinterpret_cast<P*>(y);\n"
         "  const int64_t packs = n / V;\n"
         "  constexpr int64_t kChunk = static_cast<int64_t>(kThreads) * kPerThread;\n"
         "  for (int64_t base = blockIdx.x * kChunk; base < packs; base += static_cast<int64_t>(gridDim.x) * kChunk) {\n"
         "    P p[kPerThread];\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < kPerThread; ++k) {\n"
         "      const int64_t i = base + k * kThreads + threadIdx.x;\n"
         "      if (i < packs) p[k] = xp[i];\n"
         "    }\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < kPerThread; ++k) {\n"
         "      const int64_t i = base + k * kThreads + threadIdx.x;\n"
         "      if (i < packs) {\n"
         "#pragma unroll\n"
         "        for (int c = 0; c < V; ++c) at(p[k], c) = op(at(p[k], c));\n"
         "        yp[i] = p[k];\n"
         "      }\n"
         "    }\n"
         "  }\n"
         "  const int64_t tail = packs * V + threadIdx.x;  // fewer than V elements\n"
         "  if (V > 1 && blockIdx.x == 0 && tail < n) y[tail] = op(x[tail]);\n"
         "}\n\n"
         "int resident_wave() {\n"
         "  int device = 0, sms = 0;\n"
         "  if (cudaGetDevice(&device) != cudaSuccess ||\n"
         "      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0)\n"
         "    sms = 132;\n"
         "  return sms * (2048 / kThreads);\n"
         "}\n\n"
         "template <int V>\n"
         "void launch(const float* x, float* y, int64_t n, cudaStream_t stream) {\n"
         "  const int64_t chunk = static_cast<int64_t>(kThreads) * kPerThread;\n"
         "  int64_t blocks = (n / V + chunk - 1) / chunk;\n"
         "  const int64_t cap = kGridStride ? resident_wave() : 2147483647;\n"
         "  if (blocks > cap) blocks = cap;\n"
         "  if (blocks < 1) blocks = 1;\n"
         "  elementwise_kernel<V><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n);\n"
         "}\n\n"
         "}  // namespace\n\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, "
         "void* stream) {\n"
         "  const float* x = static_cast<const float*>(in[0].data);\n"
         "  float* y = static_cast<float*>(out[0].data);\n"
         "  int64_t n = 1;\n"
         "  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  if (n <= 0) return 0;\n"
         "  constexpr int kVec = " + num(vec) + ";\n"
         "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n"
         "  if (kVec > 1 && aligned(kVec, x, y)) launch<kVec>(x, y, n, s);\n"
         "  else launch<1>(x, y, n, s);\n"
         "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n"
         "}\n";
}

// NaN propagates, as in torch.relu.
std::string relu(const eval::TaskSpec&, const std::vector<int>& v) {
  return elementwise("relu (cuda)", "v < 0.0f ? 0.0f : v", v);
}

std::string gelu(const eval::TaskSpec&, const std::vector<int>& v) {
  return elementwise("gelu (cuda)", "0.5f * v * (1.0f + erff(v * 0.707106781186547524f))", v);
}

const std::vector<Knob> kKnobs{
    {"threads", {128, 256, 512, 1024}}, {"vec", {1, 2, 4}}, {"per_thread", {1, 2, 4, 8}}, {"grid_stride", {0, 1}}};
const KernelTemplate kRelu{"relu", kKnobs, relu};
const KernelTemplate kGelu{"gelu", kKnobs, gelu};

}  // namespace

std::vector<const KernelTemplate*> elementwise_cuda() { return {&kRelu, &kGelu}; }

}  // namespace crucible::policy::templates

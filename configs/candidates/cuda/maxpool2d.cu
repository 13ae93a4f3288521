// Naive correct CUDA candidate for the maxpool2d task.
#include <crucible/kernel.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

constexpr int64_t kKernel = 2, kStride = 2;  // the task's params; no padding

// One thread per output element y[n, c, oy, ox] (grid-stride, 64-bit indices): max over the 2x2 window.
// NaN propagates, like torch.
__global__ void maxpool2d_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int64_t H,
                                 int64_t W, int64_t HO, int64_t WO) {
  const int64_t total = planes * HO * WO;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t ox = i % WO;
    const int64_t t = i / WO;
    const int64_t oy = t % HO;
    const int64_t p = t / HO;
    const float* xp = x + p * H * W;
    float m = -INFINITY;
    for (int64_t ky = 0; ky < kKernel; ++ky) {
      const int64_t iy = oy * kStride + ky;
      if (iy >= H) continue;
      for (int64_t kx = 0; kx < kKernel; ++kx) {
        const int64_t ix = ox * kStride + kx;
        if (ix >= W) continue;
        const float v = xp[iy * W + ix];
        if (v > m || isnan(v)) m = v;
      }
    }
    y[i] = m;
  }
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const int64_t planes = in[0].shape[0] * in[0].shape[1], H = in[0].shape[2], W = in[0].shape[3];
  const int64_t HO = out[0].shape[2], WO = out[0].shape[3];
  const int64_t total = planes * HO * WO;
  if (total > 0) {
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 524288) blocks = 524288;  // grid-stride loop covers the rest
    maxpool2d_kernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), planes, H, W, HO, WO);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

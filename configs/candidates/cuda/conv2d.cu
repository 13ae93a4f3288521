// Naive correct CUDA candidate for the conv2d task.
#include <crucible/kernel.h>
#include <cuda_runtime.h>

namespace {

constexpr int64_t kPad = 1;  // stride 1, padding 1

// One thread per output element y[n, o, oy, ox] (grid-stride, 64-bit indices): direct convolution over the
// input channels and the KH x KW window, skipping taps that fall in the zero padding.
__global__ void conv2d_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                              int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW,
                              int64_t HO, int64_t WO) {
  const int64_t total = N * O * HO * WO;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t ox = i % WO;
    int64_t t = i / WO;
    const int64_t oy = t % HO;
    t /= HO;
    const int64_t o = t % O;
    const int64_t n = t / O;
    const float* xn = x + n * C * H * W;
    const float* wo = w + o * C * KH * KW;
    float acc = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float* xc = xn + c * H * W;
      const float* wc = wo + c * KH * KW;
      for (int64_t ky = 0; ky < KH; ++ky) {
        const int64_t iy = oy + ky - kPad;
        if (iy < 0 || iy >= H) continue;
        for (int64_t kx = 0; kx < KW; ++kx) {
          const int64_t ix = ox + kx - kPad;
          if (ix < 0 || ix >= W) continue;
          acc += xc[iy * W + ix] * wc[ky * KW + kx];
        }
      }
    }
    y[i] = acc;
  }
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const int64_t N = in[0].shape[0], C = in[0].shape[1], H = in[0].shape[2], W = in[0].shape[3];
  const int64_t O = in[1].shape[0], KH = in[1].shape[2], KW = in[1].shape[3];
  const int64_t HO = out[0].shape[2], WO = out[0].shape[3];
  const int64_t total = N * O * HO * WO;
  if (total > 0) {
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 524288) blocks = 524288;  // grid-stride loop covers the rest
    conv2d_kernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data),
        static_cast<float*>(out[0].data), N, C, H, W, O, KH, KW, HO, WO);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

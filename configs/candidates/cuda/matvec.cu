// Naive correct CUDA candidate for the matvec task.
#include <crucible/kernel.h>
#include <cuda_runtime.h>

namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32); every thread gets the same total.
__device__ __forceinline__ float block_sum(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // earlier readers of sh are done
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  return warp_sum(lane < nwarps ? sh[lane] : 0.0f);
}

// y[r] = sum_k a[r, k] * x[k]. One block per row (grid-stride over rows). The rows are long (K ~ 1M), so each
// thread's strided partial sum is Kahan-compensated to keep float accumulation error well inside tolerance.
__global__ void matvec_kernel(const float* __restrict__ a, const float* __restrict__ x, float* __restrict__ y,
                              int64_t M, int64_t K) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const float* ar = a + r * K;
    float s = 0.0f, comp = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const float term = ar[k] * x[k] - comp;
      const float t = s + term;
      comp = (t - s) - term;
      s = t;
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) y[r] = s;
  }
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const int64_t M = in[0].shape[0], K = in[0].shape[1];
  if (M > 0) {  // K == 0 still writes zeros
    const unsigned blocks = static_cast<unsigned>(M < 2147483647 ? M : 2147483647);
    matvec_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data),
        static_cast<float*>(out[0].data), M, K);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// Naive correct CUDA candidate for the layernorm task.
#include <crucible/kernel.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

constexpr float kEps = 1e-5f;  // the task's params.eps

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32); every thread gets the same total.
// Every thread of the block must call it; sh holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // earlier readers of sh are done
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  return warp_sum(lane < nwarps ? sh[lane] : 0.0f);
}

// One block per row (grid-stride over rows): mean, then biased variance around it, then write.
__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y, int64_t rows, int64_t cols) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const float mean = block_sum(s, sh) / static_cast<float>(cols);
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = xr[j] - mean;
      sq += d * d;
    }
    const float var = block_sum(sq, sh) / static_cast<float>(cols);
    const float rstd = 1.0f / sqrtf(var + kEps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const int64_t cols = in[0].shape[in[0].ndim - 1];
  int64_t rows = 1;
  for (int32_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].shape[d];
  if (rows > 0 && cols > 0) {
    const unsigned blocks = static_cast<unsigned>(rows < 2147483647 ? rows : 2147483647);
    layernorm_kernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data),
        static_cast<const float*>(in[2].data), static_cast<float*>(out[0].data), rows, cols);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

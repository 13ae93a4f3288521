// Naive correct CUDA candidate for the argmax_dim task.
#include <crucible/kernel.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int64_t kNoIndex = 0x7fffffffffffffffLL;

// (va, ia) beats (vb, ib): larger value (NaN counts as largest, like torch), ties to the lower index.
__device__ __forceinline__ bool better(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// One block per row (grid-stride over rows); each thread scans its columns in increasing order, keeping
// the first maximum, then the block reduces (value, index) pairs.
__global__ void argmax_kernel(const float* __restrict__ x, int64_t* __restrict__ idx, int64_t rows, int64_t cols) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float bv = -INFINITY;
    int64_t bi = kNoIndex;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = xr[j];
      if (better(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, bv, o);
      const int64_t oi = __shfl_xor_sync(kFull, bi, o);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    __syncthreads();  // the previous row's readers of sv/si are done
    if (lane == 0) {
      sv[warp] = bv;
      si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
      bv = lane < nwarps ? sv[lane] : -INFINITY;
      bi = lane < nwarps ? si[lane] : kNoIndex;
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, o);
        const int64_t oi = __shfl_xor_sync(kFull, bi, o);
        if (better(ov, oi, bv, bi)) {
          bv = ov;
          bi = oi;
        }
      }
      if (lane == 0) idx[r] = bi;
    }
  }
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const int64_t cols = in[0].shape[in[0].ndim - 1];
  int64_t rows = 1;
  for (int32_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].shape[d];
  if (rows > 0 && cols > 0) {
    const unsigned blocks = static_cast<unsigned>(rows < 2147483647 ? rows : 2147483647);
    argmax_kernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(in[0].data), static_cast<int64_t*>(out[0].data), rows, cols);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

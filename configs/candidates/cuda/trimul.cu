// Naive correct CUDA candidate for the trimul task: one thread per output element in each step of the reference
// (layer norm, the five projections, the triangle product, the output norm and projection), with stream-ordered
// scratch memory (cudaMallocAsync) for the steps' results.
#include <crucible/kernel.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// One thread per row: y = layer_norm(x) * w + b over d columns (in place allowed).
__global__ void norm_rows(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float* row = x + r * d;
  float mean = 0.0f, sq = 0.0f;
  for (int64_t j = 0; j < d; ++j) mean += row[j];
  mean /= static_cast<float>(d);
  for (int64_t j = 0; j < d; ++j) sq += (row[j] - mean) * (row[j] - mean);
  const float rstd = rsqrtf(sq / static_cast<float>(d) + 1e-5f);
  for (int64_t j = 0; j < d; ++j) y[r * d + j] = (row[j] - mean) * rstd * w[j] + b[j];
}

__device__ __forceinline__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// One thread per (row, h): the gated, masked left and right projections and the out gate.
__global__ void project(const float* xn, const float* mask, const float* lp, const float* rp, const float* lg,
                        const float* rg, const float* og, float* left, float* right, float* gate, int64_t rows,
                        int64_t C, int64_t H) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= rows * H) return;
  const int64_t r = t / H, h = t % H;
  const float* x = xn + r * C;
  left[t] = dot(x, lp + h * C, C) * mask[r] * sigmoid(dot(x, lg + h * C, C));
  right[t] = dot(x, rp + h * C, C) * mask[r] * sigmoid(dot(x, rg + h * C, C));
  gate[t] = sigmoid(dot(x, og + h * C, C));
}

// One thread per (b, i, j, h): sum over k of left[b, i, k, h] * right[b, j, k, h].
__global__ void triangle(const float* left, const float* right, float* tri, int64_t B, int64_t N, int64_t H) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= B * N * N * H) return;
  const int64_t h = t % H, j = (t / H) % N, i = (t / (H * N)) % N, b = t / (H * N * N);
  float s = 0.0f;
  for (int64_t k = 0; k < N; ++k) s += left[((b * N + i) * N + k) * H + h] * right[((b * N + j) * N + k) * H + h];
  tri[t] = s;
}

// One thread per (row, c): the normed, gated triangle row times the output projection's row c.
__global__ void project_out(const float* normed, const float* gate, const float* to_out, float* out, int64_t rows,
                            int64_t H, int64_t C) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= rows * C) return;
  const int64_t r = t / C, c = t % C;
  float s = 0.0f;
  for (int64_t h = 0; h < H; ++h) s += normed[r * H + h] * gate[r * H + h] * to_out[c * H + h];
  out[t] = s;
}

unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t B = in[0].shape[0], N = in[0].shape[1], C = in[0].shape[3], H = in[4].shape[0];
  const int64_t rows = B * N * N;
  const auto f = [&](int i) { return static_cast<const float*>(in[i].data); };
  float *xn = nullptr, *left = nullptr, *right = nullptr, *gate = nullptr, *tri = nullptr;
  // Stream-ordered scratch: allocated and freed in the stream's order, no synchronisation needed.
  if (cudaMallocAsync(reinterpret_cast<void**>(&xn), rows * C * sizeof(float), s) != cudaSuccess ||
      cudaMallocAsync(reinterpret_cast<void**>(&left), rows * H * sizeof(float), s) != cudaSuccess ||
      cudaMallocAsync(reinterpret_cast<void**>(&right), rows * H * sizeof(float), s) != cudaSuccess ||
      cudaMallocAsync(reinterpret_cast<void**>(&gate), rows * H * sizeof(float), s) != cudaSuccess ||
      cudaMallocAsync(reinterpret_cast<void**>(&tri), rows * H * sizeof(float), s) != cudaSuccess)
    return 1;
  norm_rows<<<blocks(rows), 256, 0, s>>>(f(0), f(2), f(3), xn, rows, C);
  project<<<blocks(rows * H), 256, 0, s>>>(xn, f(1), f(4), f(5), f(6), f(7), f(8), left, right, gate, rows, C, H);
  triangle<<<blocks(rows * H), 256, 0, s>>>(left, right, tri, B, N, H);
  norm_rows<<<blocks(rows), 256, 0, s>>>(tri, f(9), f(10), tri, rows, H);
  project_out<<<blocks(rows * C), 256, 0, s>>>(tri, gate, f(11), static_cast<float*>(out[0].data), rows, H, C);
  for (float* p : {xn, left, right, gate, tri}) cudaFreeAsync(p, s);
  return 0;
}

// Naive correct CPU candidate for the trimul task: the reference's steps one after another, with scratch buffers
// for the normalised x, the gated left and right projections, the out gate and the triangle product.
#include <crucible/kernel.h>

#include <cmath>
#include <vector>

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// y[r, :] = layer_norm(x[r, :]) * weight + bias over rows of width d.
void layer_norm(const float* x, float* y, int64_t rows, int64_t d, const float* weight, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * d;
    double mean = 0.0, sq = 0.0;
    for (int64_t j = 0; j < d; ++j) mean += row[j];
    mean /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) sq += (row[j] - mean) * (row[j] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + 1e-5);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = static_cast<float>((row[j] - mean) * inv * weight[j] + bias[j]);
  }
}

// One output of a bias-free Linear: dot(x_row, w_row) over c.
float dot(const float* x_row, const float* w_row, int64_t c) {
  float s = 0.0f;
  for (int64_t k = 0; k < c; ++k) s += x_row[k] * w_row[k];
  return s;
}

}  // namespace

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const int64_t B = in[0].shape[0], N = in[0].shape[1], C = in[0].shape[3], H = in[4].shape[0];
  const auto f = [&](int i) { return static_cast<const float*>(in[i].data); };
  const float *x = f(0), *mask = f(1), *left_proj = f(4), *right_proj = f(5), *left_gate = f(6), *right_gate = f(7),
              *out_gate = f(8), *to_out = f(11);
  float* y = static_cast<float*>(out[0].data);
  const int64_t pairs = B * N * N;  // rows of x: (b, i, k)

  std::vector<float> xn(pairs * C), left(pairs * H), right(pairs * H), gate(pairs * H), tri(pairs * H);
  layer_norm(x, xn.data(), pairs, C, f(2), f(3));
  for (int64_t r = 0; r < pairs; ++r) {
    const float* xr = xn.data() + r * C;
    for (int64_t h = 0; h < H; ++h) {
      left[r * H + h] = dot(xr, left_proj + h * C, C) * mask[r] * sigmoid(dot(xr, left_gate + h * C, C));
      right[r * H + h] = dot(xr, right_proj + h * C, C) * mask[r] * sigmoid(dot(xr, right_gate + h * C, C));
      gate[r * H + h] = sigmoid(dot(xr, out_gate + h * C, C));
    }
  }
  // tri[b, i, j, h] = sum_k left[b, i, k, h] * right[b, j, k, h]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float* t = tri.data() + ((b * N + i) * N + j) * H;
        for (int64_t h = 0; h < H; ++h) t[h] = 0.0f;
        for (int64_t k = 0; k < N; ++k) {
          const float* l = left.data() + ((b * N + i) * N + k) * H;
          const float* rr = right.data() + ((b * N + j) * N + k) * H;
          for (int64_t h = 0; h < H; ++h) t[h] += l[h] * rr[h];
        }
      }
  std::vector<float> normed(pairs * H);
  layer_norm(tri.data(), normed.data(), pairs, H, f(9), f(10));
  for (int64_t r = 0; r < pairs; ++r) {
    float* g = normed.data() + r * H;
    for (int64_t h = 0; h < H; ++h) g[h] *= gate[r * H + h];
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = dot(g, to_out + c * H, H);
  }
  return 0;
}

// Naive correct CPU candidate for the layernorm task.
#include <crucible/kernel.h>
#include <cmath>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* weight = static_cast<const float*>(in[1].data);
  const float* bias = static_cast<const float*>(in[2].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t r = in[0].shape[0];
  const int64_t d = in[0].shape[1];
  const double eps = 1e-5;
  for (int64_t i = 0; i < r; ++i) {
    const float* row = x + i * d;
    double sum = 0.0;
    for (int64_t j = 0; j < d; ++j) sum += row[j];
    const double mean = sum / static_cast<double>(d);
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double dv = row[j] - mean;
      sq += dv * dv;
    }
    const double var = sq / static_cast<double>(d);
    const double inv_std = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j)
      y[i * d + j] = static_cast<float>((row[j] - mean) * inv_std * weight[j] + bias[j]);
  }
  return 0;
}

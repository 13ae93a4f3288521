// Naive correct CPU candidate for the rmsnorm task.
#include <crucible/kernel.h>
#include <cmath>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* weight = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t r = in[0].shape[0];
  const int64_t d = in[0].shape[1];
  const double eps = 1e-6;
  for (int64_t i = 0; i < r; ++i) {
    const float* row = x + i * d;
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += static_cast<double>(row[j]) * row[j];
    const double inv_rms = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = static_cast<float>(row[j] * inv_rms * weight[j]);
  }
  return 0;
}

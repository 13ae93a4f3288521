// Naive correct CPU candidate for the gelu task.
#include <crucible/kernel.h>
#include <cmath>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t n = in[0].shape[0] * in[0].shape[1];
  const double inv_sqrt2 = 0.70710678118654752440;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * inv_sqrt2)));
  }
  return 0;
}

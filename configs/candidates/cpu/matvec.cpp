// Naive correct CPU candidate for the matvec task.
#include <crucible/kernel.h>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* a = static_cast<const float*>(in[0].data);
  const float* x = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t m = in[0].shape[0];
  const int64_t k = in[0].shape[1];
  for (int64_t i = 0; i < m; ++i) {
    const float* row = a + i * k;
    double acc = 0.0;
    for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(row[p]) * x[p];
    y[i] = static_cast<float>(acc);
  }
  return 0;
}

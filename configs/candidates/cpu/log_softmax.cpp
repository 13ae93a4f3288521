// Naive correct CPU candidate for the log_softmax task.
#include <crucible/kernel.h>
#include <cmath>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t m = in[0].shape[0];
  const int64_t n = in[0].shape[1];
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * n;
    double mx = row[0];
    for (int64_t j = 1; j < n; ++j)
      if (row[j] > mx) mx = row[j];
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
    const double lse = mx + std::log(s);
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = static_cast<float>(row[j] - lse);
  }
  return 0;
}

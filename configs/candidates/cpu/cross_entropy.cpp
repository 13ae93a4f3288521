// Naive correct CPU candidate for the cross_entropy task.
#include <crucible/kernel.h>
#include <cmath>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* logits = static_cast<const float*>(in[0].data);
  const int64_t* targets = static_cast<const int64_t*>(in[1].data);
  float* loss = static_cast<float*>(out[0].data);
  const int64_t n = in[0].shape[0];
  const int64_t c = in[0].shape[1];
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * c;
    double mx = row[0];
    for (int64_t j = 1; j < c; ++j)
      if (row[j] > mx) mx = row[j];
    double s = 0.0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
    const double lse = mx + std::log(s);
    total += lse - static_cast<double>(row[targets[i]]);
  }
  loss[0] = static_cast<float>(total / static_cast<double>(n));
  return 0;
}

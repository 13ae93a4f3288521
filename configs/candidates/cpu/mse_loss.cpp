// Naive correct CPU candidate for the mse_loss task.
#include <crucible/kernel.h>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* pred = static_cast<const float*>(in[0].data);
  const float* target = static_cast<const float*>(in[1].data);
  float* loss = static_cast<float*>(out[0].data);
  const int64_t n = in[0].shape[0] * in[0].shape[1];
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pred[i]) - target[i];
    acc += d * d;
  }
  loss[0] = static_cast<float>(acc / static_cast<double>(n));
  return 0;
}

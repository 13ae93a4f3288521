// Naive correct CPU candidate for the argmax_dim task.
#include <crucible/kernel.h>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  int64_t* idx = static_cast<int64_t*>(out[0].data);
  const int64_t m = in[0].shape[0];
  const int64_t n = in[0].shape[1];
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * n;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (row[j] > row[best]) best = j;
    idx[i] = best;
  }
  return 0;
}

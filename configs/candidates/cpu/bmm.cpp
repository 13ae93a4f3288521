// Naive correct CPU candidate for the bmm task.
#include <crucible/kernel.h>
#include <cstdlib>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* a = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* c = static_cast<float*>(out[0].data);
  const int64_t batch = in[0].shape[0];
  const int64_t m = in[0].shape[1];
  const int64_t k = in[0].shape[2];
  const int64_t n = in[1].shape[2];
  double* acc = static_cast<double*>(std::malloc(sizeof(double) * n));
  if (!acc) return 1;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* ab = a + bi * m * k;
    const float* bb = b + bi * k * n;
    float* cb = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ab[i * k + p];
        const float* brow = bb + p * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * brow[j];
      }
      for (int64_t j = 0; j < n; ++j) cb[i * n + j] = static_cast<float>(acc[j]);
    }
  }
  std::free(acc);
  return 0;
}

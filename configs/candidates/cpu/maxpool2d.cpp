// Naive correct CPU candidate for the maxpool2d task.
#include <crucible/kernel.h>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t planes = in[0].shape[0] * in[0].shape[1];
  const int64_t h = in[0].shape[2];
  const int64_t w = in[0].shape[3];
  const int64_t ho = out[0].shape[2];
  const int64_t wo = out[0].shape[3];
  const int64_t kernel = 2;
  const int64_t stride = 2;
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * h * w;
    float* yp = y + p * ho * wo;
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox) {
        float best = xp[(oy * stride) * w + ox * stride];
        for (int64_t ky = 0; ky < kernel; ++ky)
          for (int64_t kx = 0; kx < kernel; ++kx) {
            const float v = xp[(oy * stride + ky) * w + ox * stride + kx];
            if (v > best) best = v;
          }
        yp[oy * wo + ox] = best;
      }
  }
  return 0;
}

// Naive correct CPU candidate for the conv2d task.
#include <crucible/kernel.h>

CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t batch = in[0].shape[0];
  const int64_t c_in = in[0].shape[1];
  const int64_t h = in[0].shape[2];
  const int64_t wd = in[0].shape[3];
  const int64_t c_out = in[1].shape[0];
  const int64_t kh = in[1].shape[2];
  const int64_t kw = in[1].shape[3];
  const int64_t pad = 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < c_out; ++o)
      for (int64_t oy = 0; oy < h; ++oy)
        for (int64_t ox = 0; ox < wd; ++ox) {
          double acc = 0.0;
          for (int64_t c = 0; c < c_in; ++c)
            for (int64_t ky = 0; ky < kh; ++ky) {
              const int64_t iy = oy + ky - pad;
              if (iy < 0 || iy >= h) continue;
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t ix = ox + kx - pad;
                if (ix < 0 || ix >= wd) continue;
                acc += static_cast<double>(x[((b * c_in + c) * h + iy) * wd + ix]) *
                       w[((o * c_in + c) * kh + ky) * kw + kx];
              }
            }
          y[((b * c_out + o) * h + oy) * wd + ox] = static_cast<float>(acc);
        }
  return 0;
}

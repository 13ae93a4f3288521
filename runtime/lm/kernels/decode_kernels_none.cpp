#include <stdexcept>

#include "lm/kernels/decode_kernels.h"

namespace crucible::lm {

// A CPU LibTorch: decode steps run LibTorch's kernels.
bool decode_kernels_serve(const at::Tensor&) { return false; }

bool rotate_into_cache_serves(const at::Tensor&, int64_t, bool) { return false; }

void set_decode_kernels(bool) {}

bool decode_attention_takes(const at::Tensor&, int64_t) { return false; }

bool decode_attention_serves(const at::Tensor&, int64_t) { return false; }

void set_decode_attention(bool) {}

bool decode_attention_on_tensor_cores(const at::Tensor&, int64_t) { return false; }

void set_decode_attention_tensor_cores(bool) {}

bool small_linear_serves(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const LinearFolds&) {
  return false;
}

void set_small_linear(bool) {}

void set_small_linear_ahead(bool) {}

void set_early_launch(bool) {}

at::Tensor small_linear(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const LinearFolds&) {
  throw std::logic_error("small_linear: this build has no CUDA LibTorch");
}

bool decode_attention_serves_sinks(const at::Tensor&, int64_t) { return false; }

at::Tensor decode_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t, double, const at::Tensor&, int64_t) {
  throw std::logic_error("decode_attention: this build has no CUDA LibTorch");
}

at::Tensor rotate_into_cache(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, at::Tensor&, at::Tensor&, int64_t, int64_t, const at::Tensor&,
                             const at::Tensor&, double) {
  throw std::logic_error("rotate_into_cache: this build has no CUDA LibTorch");
}

bool rotation_folds_into_attention(const at::Tensor&, int64_t, bool) { return false; }

void set_rotation_fold(bool) {}

at::Tensor rotate_and_attend(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&,
                             at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, double, int64_t,
                             const at::Tensor&, int64_t) {
  throw std::logic_error("rotate_and_attend: this build has no CUDA LibTorch");
}

at::Tensor silu_times_up(const at::Tensor&) { throw std::logic_error("silu_times_up: this build has no CUDA LibTorch"); }

at::Tensor pick_by_cdf_fused(const at::Tensor&, const at::Tensor&) {
  throw std::logic_error("pick_by_cdf_fused: this build has no CUDA LibTorch");
}

bool sample_fused_serves(const at::Tensor&) { return false; }

void set_fused_sampling(bool) {}

FusedSample sample_fused(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         int64_t) {
  throw std::logic_error("sample_fused: this build has no CUDA LibTorch");
}

}  // namespace crucible::lm

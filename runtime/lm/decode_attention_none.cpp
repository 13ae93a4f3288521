#include <stdexcept>

#include "lm/decode_attention.h"

namespace crucible::lm {

// A CPU LibTorch: decode steps keep LibTorch's attention.
bool decode_attention_serves(const at::TensorOptions&, int64_t) { return false; }

at::Tensor decode_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            double) {
  throw std::logic_error("decode_attention: this build has no CUDA LibTorch");
}

}  // namespace crucible::lm

#pragma once
// A tensor's dtype as the kernels' launch arguments name it (float32 unless 16-bit).
#include <ATen/core/Tensor.h>

#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm {

inline kernels::Element element_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return kernels::Element::bf16;
    case at::kHalf: return kernels::Element::f16;
    default: return kernels::Element::f32;
  }
}

}  // namespace crucible::lm

#include <stdexcept>

#include "lm/kernels/moe_kernels.h"

namespace crucible::lm {

// A CPU LibTorch: experts are decoded and multiplied with LibTorch's operators (moe.cpp).
bool expert_gemv_serves(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t) { return false; }

void set_expert_kernels(bool) {}

at::Tensor expert_gemv(const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&) {
  throw std::logic_error("expert_gemv: this build has no CUDA kernels");
}

}  // namespace crucible::lm

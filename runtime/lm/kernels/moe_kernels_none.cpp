#include <stdexcept>

#include "lm/kernels/moe_kernels.h"

namespace crucible::lm {

// A CPU LibTorch: experts are decoded and multiplied with LibTorch's operators (moe.cpp).
bool expert_gemv_serves(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, ExpertProducts) {
  return false;
}

void set_expert_kernels(bool) {}

void set_expert_ordered_tile(int tile) {
  if (tile != 0 && tile != 32 && tile != 64)
    throw std::invalid_argument("set_expert_ordered_tile: 32 or 64 assignments, or 0 (chosen a pass)");
}

ExpertProducts expert_products_for(const at::Tensor&, c10::ScalarType) { return ExpertProducts::float32; }

void set_expert_tensor_cores(bool) {}

ExpertOrder expert_order_for(const at::Tensor&, int64_t, ExpertProducts) { return {}; }

at::Tensor expert_gemv(const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&, ExpertProducts, const ExpertOrder*) {
  throw std::logic_error("expert_gemv: this build has no CUDA kernels");
}

bool expert_epilogues_serve(ExpertProducts) { return false; }

void set_expert_epilogues(bool) {}
bool expert_bulk_copies_serve(const at::Tensor&, const at::Tensor&) { return false; }
void set_expert_bulk_copies(bool) {}

at::Tensor expert_gemv_swiglu(const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const SwigluClamp&, const ExpertOrder*) {
  throw std::logic_error("expert_gemv_swiglu: this build has no CUDA kernels");
}

bool expert_sum_fuses(const at::Tensor&, int64_t, int64_t, int64_t, ExpertProducts) { return false; }

at::Tensor expert_gemv_summed(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const at::Tensor&, c10::ScalarType, const at::Tensor&) {
  throw std::logic_error("expert_gemv_summed: this build has no CUDA kernels");
}

bool mxfp4_decode_serves(const at::Tensor&, const at::Tensor&, c10::ScalarType) { return false; }

at::Tensor mxfp4_decode_on_device(const at::Tensor&, const at::Tensor&, c10::ScalarType) {
  throw std::logic_error("mxfp4_decode_on_device: this build has no CUDA kernels");
}

bool route_kernel_serves(const at::Tensor&, int64_t) { return false; }

void set_route_kernel(bool) {}

std::pair<at::Tensor, at::Tensor> route_top_k(const at::Tensor&, int64_t) {
  throw std::logic_error("route_top_k: this build has no CUDA kernels");
}

at::Tensor clamped_swiglu_on_device(const at::Tensor&, double, double, c10::ScalarType) {
  throw std::logic_error("clamped_swiglu_on_device: this build has no CUDA kernels");
}

at::Tensor weighted_expert_sum(const at::Tensor&, const at::Tensor&, c10::ScalarType, const at::Tensor&) {
  throw std::logic_error("weighted_expert_sum: this build has no CUDA kernels");
}

}  // namespace crucible::lm

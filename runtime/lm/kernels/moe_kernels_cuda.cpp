#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "lm/kernels/element_of.h"
#include "lm/kernels/kernel_switch.h"
#include "lm/kernels/moe_kernels.h"
#include "lm/kernels/moe_kernels_launch.h"

namespace crucible::lm {
namespace {

std::atomic<bool>& switched_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_MOE_KERNELS")};
  return on;
}

std::atomic<bool>& tensor_cores_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_MOE_TENSOR_CORES")};
  return on;
}

// 0: chosen a pass by kernels::ordered_tile_for.
std::atomic<int>& ordered_tile() {
  static std::atomic<int> tile{[] {
    const char* value = std::getenv("CRUCIBLE_MOE_ORDERED_TILE");
    const std::string_view set = value ? value : "";
    return set == "64" ? kernels::kWideOrderedTile : set == "32" ? kernels::kOrderedTile : 0;
  }()};
  return tile;
}

std::atomic<bool>& epilogues_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_MOE_EPILOGUES")};
  return on;
}

std::atomic<bool>& bulk_copies_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_MOE_BULK")};
  return on;
}

std::atomic<bool>& route_kernel_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_ROUTE_KERNEL")};
  return on;
}

// The CUDA-core kernel keeps an expert's assignments in shared memory (up to 256); the tensor cores' takes any
// number in its experts' order, for up to kMaxRouteExperts experts.
int64_t most_assignments(ExpertProducts products, int64_t experts) {
  return products == ExpertProducts::bfloat16 && experts <= kernels::kMaxRouteExperts
             ? std::numeric_limits<int32_t>::max()
             : kernels::kMaxExpertAssignments;
}

// The tensor-core kernel's instructions (its body is empty for older GPUs).
bool has_tensor_cores(const at::Tensor& x) { return at::cuda::getDeviceProperties(x.get_device())->major >= 8; }

bool float_type(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

}  // namespace

bool expert_gemv_serves(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& scales, int64_t assignments,
                        ExpertProducts products) {
  return switched_on().load(std::memory_order_relaxed) && x.is_cuda() && float_type(x) &&
         !(at::GradMode::is_enabled() && x.requires_grad()) && blocks.defined() && blocks.device() == x.device() &&
         scales.device() == x.device() && blocks.scalar_type() == at::kByte && scales.scalar_type() == at::kByte &&
         blocks.is_contiguous() && scales.is_contiguous() && blocks.dim() == 4 && blocks.size(3) == 16 &&
         reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 16 == 0 &&  // codes are read 16 bytes at a time
         assignments > 0 && assignments <= most_assignments(products, blocks.size(0));
}

void set_expert_kernels(bool on) { switched_on().store(on, std::memory_order_relaxed); }

void set_expert_ordered_tile(int tile) {
  TORCH_CHECK(tile == 0 || tile == kernels::kOrderedTile || tile == kernels::kWideOrderedTile,
              "set_expert_ordered_tile: 32 or 64 assignments, or 0 (chosen a pass)");
  ordered_tile().store(tile, std::memory_order_relaxed);
}

ExpertProducts expert_products_for(const at::Tensor& x, c10::ScalarType dtype) {
  const bool tensor_cores = tensor_cores_on().load(std::memory_order_relaxed) && dtype == at::kBFloat16 &&
                            x.is_cuda() && has_tensor_cores(x);
  return tensor_cores ? ExpertProducts::bfloat16 : ExpertProducts::float32;
}

void set_expert_tensor_cores(bool on) { tensor_cores_on().store(on, std::memory_order_relaxed); }

ExpertOrder expert_order_for(const at::Tensor& experts, int64_t experts_count, ExpertProducts products) {
  if (products != ExpertProducts::bfloat16 || experts.numel() <= kernels::kMaxExpertAssignments) return {};
  const auto counts = at::zeros({experts_count}, experts.options()).index_add_(0, experts, at::ones_like(experts));
  return {std::get<1>(at::sort(experts, /*stable=*/true, 0, /*descending=*/false)).to(at::kInt),
          at::cat({at::zeros({1}, counts.options()), at::cumsum(counts, 0)}).to(at::kInt)};
}

namespace {

// A launch of the experts' kernel as expert_gemv checks and prepares it: its arguments (no output yet), and what
// they point into, kept alive past the launch (the stream orders the release).
struct ExpertLaunch {
  kernels::ExpertGemvArgs args;
  at::Tensor x, bias;
  ExpertOrder made;
};

ExpertLaunch prepared_launch(const at::Tensor& input, int64_t x_divisor, const at::Tensor& experts,
                             const at::Tensor& blocks, const at::Tensor& scales, const at::Tensor& bias,
                             ExpertProducts products, const ExpertOrder* order) {
  TORCH_CHECK(input.dim() == 2 && input.stride(1) == 1, "expert_gemv: x must be [rows, cols] with cols contiguous");
  // The kernel reads 8 values of a row at a time, 16-byte aligned.
  const bool aligned = reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 == 0 &&
                       (input.stride(0) * input.element_size()) % 16 == 0;
  const bool bf16_products = products == ExpertProducts::bfloat16;
  TORCH_CHECK(!bf16_products || input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kFloat,
              "expert_gemv: bfloat16 products take x in bfloat16 or float32");
  ExpertLaunch l;
  // The tensor cores' kernel copies its inputs as they are, in bfloat16 (rounded to nearest even, as it multiplies).
  l.x = bf16_products && input.scalar_type() == at::kFloat ? input.to(at::kBFloat16)
        : aligned                                          ? input
                                                           : input.clone(at::MemoryFormat::Contiguous);
  const at::Tensor& x = l.x;
  TORCH_CHECK(expert_gemv_serves(x, blocks, scales, experts.numel(), products),
              "expert_gemv: inputs the kernel does not take");
  TORCH_CHECK(!bf16_products || has_tensor_cores(x),
              "expert_gemv: bfloat16 products need compute capability 8.0 or later");
  const int64_t E = blocks.size(0), out_rows = blocks.size(1), cols = blocks.size(2) * 32;
  TORCH_CHECK(x.size(1) == cols && scales.sizes() == blocks.sizes().slice(0, 3),
              "expert_gemv: x's columns and the scales must match the blocks");
  TORCH_CHECK(experts.scalar_type() == at::kLong && experts.is_contiguous() && experts.device() == x.device() &&
                  x_divisor > 0 && experts.numel() <= x.size(0) * x_divisor,
              "expert_gemv: experts [A] int64 on x's device, one x row per x_divisor of them");
  l.bias = bias.defined() ? bias.contiguous() : bias;
  const at::Tensor& b = l.bias;
  TORCH_CHECK(!b.defined() || (b.dim() == 2 && b.size(0) == E && b.size(1) == out_rows && float_type(b) &&
                               b.device() == x.device()),
              "expert_gemv: bias must be [E, out] on x's device");
  kernels::ExpertGemvArgs& a = l.args;
  a.x = x.data_ptr();
  a.x_row_stride = x.stride(0);
  a.x_divisor = static_cast<int>(x_divisor);
  a.x_element = element_of(x);
  a.experts = experts.data_ptr<int64_t>();
  a.assignments = static_cast<int>(experts.numel());
  a.blocks = blocks.data_ptr<uint8_t>();
  a.scales = scales.data_ptr<uint8_t>();
  a.bias = b.defined() ? b.data_ptr() : nullptr;
  a.bias_element = b.defined() ? element_of(b) : kernels::Element::f32;
  a.experts_count = static_cast<int>(E);
  a.rows = static_cast<int>(out_rows);
  a.cols = static_cast<int>(cols);
  a.bf16_products = bf16_products;
  a.bulk_copies = bulk_copies_on().load(std::memory_order_relaxed);
  const int tile = ordered_tile().load(std::memory_order_relaxed);
  a.ordered_tile = tile != 0 ? tile : kernels::ordered_tile_for(experts.numel(), E);
  if (experts.numel() > kernels::kMaxExpertAssignments) {
    if (!order || !order->order.defined()) l.made = expert_order_for(experts, E, products), order = &l.made;
    TORCH_CHECK(order->order.numel() == experts.numel() && order->offsets.numel() == E + 1 &&
                    order->order.scalar_type() == at::kInt && order->offsets.scalar_type() == at::kInt &&
                    order->order.device() == x.device() && order->offsets.device() == x.device(),
                "expert_gemv: an order of these experts' assignments");
    a.order = order->order.data_ptr<int32_t>();
    a.offsets = order->offsets.data_ptr<int32_t>();
  }
  return l;
}

// The weighted sum's inputs, checked alike for the glue kernel and the summed epilogue (`name` says which): weights
// [tokens, k] (contiguous, returned) of `assignments` in all, and the residual [tokens, width] in dtype, on `device`.
at::Tensor checked_sum_inputs(const at::Tensor& weights, int64_t assignments, c10::ScalarType dtype,
                              const at::Tensor& residual, int64_t width, c10::Device device, const char* name) {
  const auto w = weights.contiguous();
  TORCH_CHECK(w.dim() == 2 && w.numel() == assignments && w.device() == device && float_type(w) &&
                  (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf),
              name, ": weights [tokens, k] on the experts' GPU; dtype float32, bfloat16 or float16");
  TORCH_CHECK(!residual.defined() || (residual.scalar_type() == dtype && residual.is_contiguous() &&
                                      residual.device() == device && residual.numel() == w.size(0) * width),
              name, ": residual [tokens, width] in dtype, contiguous, on the experts' GPU");
  return w;
}

void run(const ExpertLaunch& l, const char* name) {
  const c10::cuda::CUDAGuard on_its_device(l.x.device());
  TORCH_CHECK(kernels::launch_expert_gemv(l.args, c10::cuda::getCurrentCUDAStream(l.x.get_device()).stream()), name,
              ": launch failed");
}

}  // namespace

at::Tensor expert_gemv(const at::Tensor& input, int64_t x_divisor, const at::Tensor& experts, const at::Tensor& blocks,
                       const at::Tensor& scales, const at::Tensor& bias, ExpertProducts products,
                       const ExpertOrder* order) {
  ExpertLaunch l = prepared_launch(input, x_divisor, experts, blocks, scales, bias, products, order);
  auto out = at::empty({experts.numel(), l.args.rows}, l.x.options().dtype(at::kFloat));
  l.args.out = out.data_ptr<float>();
  run(l, "expert_gemv");
  return out;
}

bool expert_epilogues_serve(ExpertProducts products) {
  return epilogues_on().load(std::memory_order_relaxed) && products == ExpertProducts::bfloat16;
}

void set_expert_epilogues(bool on) { epilogues_on().store(on, std::memory_order_relaxed); }

bool expert_bulk_copies_serve(const at::Tensor& blocks, const at::Tensor& scales) {
  if (!bulk_copies_on().load(std::memory_order_relaxed) || !blocks.is_cuda() || blocks.dim() != 4 ||
      blocks.scalar_type() != at::kByte || !scales.is_cuda() || scales.scalar_type() != at::kByte)
    return false;
  const c10::cuda::CUDAGuard on_its_device(blocks.device());
  return kernels::bulk_copies_take(blocks.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(),
                                   static_cast<int>(blocks.size(1)), static_cast<int>(blocks.size(2) * 32));
}

void set_expert_bulk_copies(bool on) { bulk_copies_on().store(on, std::memory_order_relaxed); }

at::Tensor expert_gemv_swiglu(const at::Tensor& x, int64_t x_divisor, const at::Tensor& experts,
                              const at::Tensor& blocks, const at::Tensor& scales, const at::Tensor& bias,
                              const SwigluClamp& clamp, const ExpertOrder* order) {
  TORCH_CHECK(expert_epilogues_serve(ExpertProducts::bfloat16) && blocks.dim() == 4 && blocks.size(1) % 2 == 0,
              "expert_gemv_swiglu: epilogues switched off, or rows that are not (gate, linear) pairs");
  ExpertLaunch l = prepared_launch(x, x_divisor, experts, blocks, scales, bias, ExpertProducts::bfloat16, order);
  auto out = at::empty({experts.numel(), l.args.rows / 2}, l.x.options().dtype(at::kBFloat16));
  l.args.activated = out.data_ptr();
  l.args.swiglu_limit = static_cast<float>(clamp.limit);
  l.args.swiglu_alpha = static_cast<float>(clamp.alpha);
  run(l, "expert_gemv_swiglu");
  return out;
}

bool expert_sum_fuses(const at::Tensor& x, int64_t tokens, int64_t k, int64_t experts_count, ExpertProducts products) {
  return expert_epilogues_serve(products) && x.is_cuda() && tokens == 1 && k > 0 && k <= kernels::kMaxRouteK &&
         k <= experts_count && kernels::summed_epilogue_built() &&
         at::cuda::getDeviceProperties(x.get_device())->major >= 9;
}

at::Tensor expert_gemv_summed(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& blocks,
                              const at::Tensor& scales, const at::Tensor& bias, const at::Tensor& weights,
                              c10::ScalarType dtype, const at::Tensor& residual) {
  ExpertLaunch l = prepared_launch(x, 1, experts, blocks, scales, bias, ExpertProducts::bfloat16, nullptr);
  TORCH_CHECK(weights.dim() == 2 && weights.size(0) == 1 && weights.size(1) == experts.numel() &&
                  expert_sum_fuses(x, 1, experts.numel(), l.args.experts_count, ExpertProducts::bfloat16),
              "expert_gemv_summed: one token's experts (weights [1, k]) the summed epilogue does not take");
  const int64_t width = l.args.rows;
  const auto w = checked_sum_inputs(weights, experts.numel(), dtype, residual, width, l.x.device(),
                                    "expert_gemv_summed");
  auto out = at::empty({1, width}, l.x.options().dtype(dtype));
  l.args.summed = out.data_ptr();
  l.args.summed_element = element_of(out);
  l.args.weights = w.data_ptr();
  l.args.weights_element = element_of(w);
  l.args.residual = residual.defined() ? residual.data_ptr() : nullptr;
  run(l, "expert_gemv_summed");
  return out;
}

bool mxfp4_decode_serves(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype) {
  return switched_on().load(std::memory_order_relaxed) && (dtype == at::kBFloat16 || dtype == at::kFloat) &&
         blocks.is_cuda() && scales.device() == blocks.device() && blocks.scalar_type() == at::kByte &&
         scales.scalar_type() == at::kByte && blocks.is_contiguous() && scales.is_contiguous() &&
         blocks.dim() >= 2 && blocks.size(-1) == 16 && blocks.sizes().slice(0, blocks.dim() - 1) == scales.sizes() &&
         reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 16 == 0;
}

at::Tensor mxfp4_decode_on_device(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype) {
  TORCH_CHECK(mxfp4_decode_serves(blocks, scales, dtype), "mxfp4_decode_on_device: inputs the kernel does not take");
  const c10::cuda::CUDAGuard on_its_device(blocks.device());
  auto shape = scales.sizes().vec();
  shape.back() *= 32;
  auto out = at::empty(shape, blocks.options().dtype(dtype));
  TORCH_CHECK(kernels::launch_mxfp4_decode(blocks.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(), out.data_ptr(),
                                           element_of(out), scales.numel(),
                                           c10::cuda::getCurrentCUDAStream(blocks.get_device()).stream()),
              "mxfp4_decode_on_device: launch failed");
  return out;
}

bool route_kernel_serves(const at::Tensor& logits, int64_t k) {
  return route_kernel_on().load(std::memory_order_relaxed) && logits.is_cuda() && float_type(logits) &&
         logits.dim() == 2 && logits.size(1) <= kernels::kMaxRouteExperts && k > 0 && k <= kernels::kMaxRouteK &&
         k <= logits.size(1);
}

void set_route_kernel(bool on) { route_kernel_on().store(on, std::memory_order_relaxed); }

std::pair<at::Tensor, at::Tensor> route_top_k(const at::Tensor& logits, int64_t k) {
  TORCH_CHECK(route_kernel_serves(logits, k), "route_top_k: logits the kernel does not take");
  const auto l = logits.detach().contiguous();
  const c10::cuda::CUDAGuard on_its_device(l.device());
  auto chosen = at::empty({l.size(0), k}, l.options().dtype(at::kLong));
  auto weights = at::empty({l.size(0), k}, l.options());
  if (l.size(0) == 0) return {chosen, weights};
  TORCH_CHECK(kernels::launch_route_top_k(l.data_ptr(), element_of(l), l.size(0), static_cast<int>(l.size(1)),
                                          static_cast<int>(k), chosen.data_ptr<int64_t>(), weights.data_ptr(),
                                          c10::cuda::getCurrentCUDAStream(l.get_device()).stream()),
              "route_top_k: launch failed");
  return {chosen, weights};
}

at::Tensor clamped_swiglu_on_device(const at::Tensor& gate_up, double limit, double alpha, c10::ScalarType dtype) {
  TORCH_CHECK(gate_up.is_cuda() && gate_up.scalar_type() == at::kFloat && gate_up.dim() == 2 &&
                  gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "clamped_swiglu_on_device: gate_up must be [rows, 2 width] float32, contiguous, on a GPU");
  const c10::cuda::CUDAGuard on_its_device(gate_up.device());
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "clamped_swiglu_on_device: out in float32, bfloat16 or float16");
  auto out = at::empty({gate_up.size(0), gate_up.size(1) / 2}, gate_up.options().dtype(dtype));
  TORCH_CHECK(kernels::launch_clamped_swiglu(gate_up.data_ptr<float>(), out.data_ptr(), element_of(out), out.size(0),
                                             static_cast<int>(out.size(1)), static_cast<float>(limit),
                                             static_cast<float>(alpha),
                                             c10::cuda::getCurrentCUDAStream(gate_up.get_device()).stream()),
              "clamped_swiglu_on_device: launch failed");
  return out;
}

at::Tensor weighted_expert_sum(const at::Tensor& experts_out, const at::Tensor& weights, c10::ScalarType dtype,
                               const at::Tensor& residual) {
  TORCH_CHECK(experts_out.is_cuda() && experts_out.scalar_type() == at::kFloat && experts_out.dim() == 2 &&
                  experts_out.is_contiguous(),
              "weighted_expert_sum: experts_out must be [tokens * k, width] float32, contiguous, on a GPU");
  const auto w = checked_sum_inputs(weights, experts_out.size(0), dtype, residual, experts_out.size(1),
                                    experts_out.device(), "weighted_expert_sum");
  const c10::cuda::CUDAGuard on_its_device(experts_out.device());
  const int64_t tokens = w.size(0), k = w.size(1), width = experts_out.size(1);
  auto out = at::empty({tokens, width}, experts_out.options().dtype(dtype));
  TORCH_CHECK(kernels::launch_weighted_expert_sum(experts_out.data_ptr<float>(), w.data_ptr(), element_of(w),
                                                  residual.defined() ? residual.data_ptr() : nullptr,
                                                  out.data_ptr(), element_of(out), tokens, static_cast<int>(k),
                                                  static_cast<int>(width),
                                                  c10::cuda::getCurrentCUDAStream(experts_out.get_device()).stream()),
              "weighted_expert_sum: launch failed");
  return out;
}

}  // namespace crucible::lm

#include "lm/model/moe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <vector>

#include "lm/kernels/decode_kernels.h"
#include "lm/kernels/moe_kernels.h"
#include "lm/model/lora.h"
#include "lm/model/mxfp4.h"

namespace crucible::lm {

at::Tensor ExpertMatrix::expert(int64_t e, c10::ScalarType dtype) const {
  if (!packed()) return dense[e];
  return mxfp4_decode(blocks[e], scales[e], dtype, CodeOrder::paired);
}

int64_t ExpertMatrix::rows() const { return packed() ? blocks.size(1) : dense.size(1); }

int64_t ExpertMatrix::cols() const { return packed() ? blocks.size(2) * kMxfp4BlockSize : dense.size(2); }

bool experts_stored_out_in(const std::vector<int64_t>& shape, int64_t experts, int64_t out, int64_t in) {
  return in != out && shape == std::vector<int64_t>{experts, out, in};
}

Routing route_tokens(const at::Tensor& router_logits, int64_t k) {
  const auto flat = router_logits.reshape({-1, router_logits.size(-1)});
  if (route_kernel_serves(flat, k)) {
    auto [experts, weights] = route_top_k(flat, k);
    // Recorded for training: the chosen logits' softmax again, through LibTorch's differentiable operators.
    if (at::GradMode::is_enabled() && router_logits.requires_grad()) weights = at::softmax(flat.gather(-1, experts), -1);
    const auto shape = router_logits.sizes().vec();
    std::vector<int64_t> routed(shape.begin(), shape.end() - 1);
    routed.push_back(k);
    return {experts.view(routed), weights.view(routed)};
  }
  const auto top = at::topk(router_logits, k, -1);
  return {std::get<1>(top), at::softmax(std::get<0>(top), -1)};
}

at::Tensor clamped_swiglu(const at::Tensor& gate_up, const MoeConfig& config) {
  const int64_t n = gate_up.size(-1) / 2;
  // Columns alternate gate, linear. Unbound rather than selected twice: the backward interleaves the two gradients
  // in one pass (two selects' backward would each fill a full-size zero tensor, then add them).
  const auto pairs = gate_up.unflatten(-1, {n, 2}).unbind(-1);
  const auto gate = pairs[0].clamp_max(config.swiglu_limit);
  const auto linear = pairs[1].clamp(-config.swiglu_limit, config.swiglu_limit);
  return (linear + 1) * (gate * at::sigmoid(gate * config.swiglu_alpha));
}

namespace {

// One expert's projection of the rows routed to it: x [n, in] -> [n, out], with the adapter's delta of that expert.
at::Tensor expert_projection(const ExpertMatrix& m, const at::Tensor& bias, LoraTarget target, int64_t e,
                             const MoeConfig& config, const at::Tensor& x, const LoraAdapter* lora, int64_t layer) {
  const auto out = at::linear(x, m.expert(e, x.scalar_type()), bias[e]);
  return lora ? lora->plus_expert_delta(layer, target, e, config.num_experts, x, out) : out;
}

// The first projection of the routed rows, its adapter's deltas added, then the clamped SwiGLU: [A, intermediate].
at::Tensor gate_up_activated(const MoeWeights& w, const MoeConfig& config, const at::Tensor& x,
                             const at::Tensor& experts, ExpertProducts products, const ExpertOrder& order,
                             const LoraAdapter* lora, int64_t layer) {
  const int64_t k = config.experts_per_token, E = config.num_experts;
  auto gate_up = expert_gemv(x, k, experts, w.gate_up.blocks, w.gate_up.scales, w.gate_up_bias, products, &order);
  if (lora) {
    const auto delta = lora->expert_deltas(layer, LoraTarget::experts_gate_up, experts, E, x.repeat_interleave(k, 0));
    if (delta.defined()) gate_up = gate_up + delta.to(at::kFloat);
  }
  return clamped_swiglu_on_device(gate_up, config.swiglu_limit, config.swiglu_alpha,
                                  products == ExpertProducts::bfloat16 ? at::kBFloat16 : at::kFloat);
}

// Every token's experts read straight from MXFP4 on the GPU (moe_kernels.h), with an adapter's expert deltas gathered
// there too: [T, hidden] -> [T, hidden], with no host synchronisation. Nothing where experts_run_on_device says no.
std::optional<at::Tensor> experts_on_device(const MoeWeights& w, const MoeConfig& config, const at::Tensor& flat,
                                            const Routing& routing, const LoraAdapter* lora, int64_t layer,
                                            const at::Tensor& residual) {
  const int64_t k = config.experts_per_token, E = config.num_experts;
  if (!experts_run_on_device(w, flat, routing.experts.numel())) return std::nullopt;
  const auto experts = routing.experts.reshape({-1}).contiguous();  // assignment a = token a / k's (a % k)-th choice
  const auto x = flat.contiguous();
  const auto products = expert_products_for(x, x.scalar_type());
  const auto order = expert_order_for(experts, E, products);  // many assignments: ordered once for both
  // Without an adapter's deltas between them, the glue kernels are the experts' kernels' epilogues.
  const bool folded = !lora && expert_epilogues_serve(products);
  const auto hidden = folded ? expert_gemv_swiglu(x, k, experts, w.gate_up.blocks, w.gate_up.scales, w.gate_up_bias,
                                                  {config.swiglu_limit, config.swiglu_alpha}, &order)
                             : gate_up_activated(w, config, x, experts, products, order, lora, layer);
  const auto residual_rows = residual.defined() ? residual.reshape({-1, residual.size(-1)}).contiguous() : residual;
  if (folded && expert_sum_fuses(hidden, flat.size(0), k, E, products))
    return expert_gemv_summed(hidden, experts, w.down.blocks, w.down.scales, w.down_bias, routing.weights,
                              flat.scalar_type(), residual_rows);
  auto out = expert_gemv(hidden, 1, experts, w.down.blocks, w.down.scales, w.down_bias, products, &order);
  if (lora) {
    const auto delta = lora->expert_deltas(layer, LoraTarget::experts_down, experts, E, hidden.to(x.scalar_type()));
    if (delta.defined()) out = out + delta.to(at::kFloat);
  }
  return weighted_expert_sum(out, routing.weights, flat.scalar_type(), residual_rows);
}

// x's rows in the order `perm`, a permutation whose inverse is `inverse`. The backward takes the gradient's rows back
// with the inverse, a gather like the forward: index_select's own backward adds into zeros with atomics (slow in
// bfloat16), needless where no two rows meet.
struct PermutedRows : torch::autograd::Function<PermutedRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& perm,
                            const at::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    return x.index_select(0, perm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0].index_select(0, ctx->get_saved_variables()[0]), at::Tensor(), at::Tensor()};
  }
};

at::Tensor permuted_rows(const at::Tensor& x, const at::Tensor& perm, const at::Tensor& inverse) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return x.index_select(0, perm);
  return PermutedRows::apply(x, perm, inverse);
}

// Each expert in turn on the tokens routed to it, through LibTorch's differentiable operators (training; the CPU).
// Assignments are put in their experts' order once (one host sync a layer, for the counts) and gathered once; each
// expert then runs only its two products on its slice, and the SwiGLU, the routing weights and the sum over each
// token's k choices run once over all assignments. Per expert that is a handful of launches forward and backward
// (slices come from one split, whose backward is one concatenation, not a full-size gradient per expert). The k
// weighted outputs are summed in float32, in the token's choices' order (no atomics: the same sum every run).
at::Tensor experts_in_turn(const MoeWeights& w, const MoeConfig& config, const at::Tensor& flat, const Routing& routing,
                           const LoraAdapter* lora, int64_t layer) {
  const int64_t k = config.experts_per_token, E = config.num_experts, T = flat.size(0);
  if (T == 0) return at::zeros_like(flat);
  const auto experts = routing.experts.reshape({-1});  // assignment a: token a / k's (a % k)-th choice
  const auto order = std::get<1>(at::sort(experts, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const auto back = at::argsort(order);  // assignment a's place in the experts' order
  const auto counts = at::bincount(experts, {}, E).to(at::kCPU);
  const std::vector<int64_t> sizes(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + E);
  // Each token's row k times, then permuted: the backward adds each token's k rows in a fixed order (no atomics: the
  // same input gradient every run).
  const auto repeated = flat.unsqueeze(1).expand({T, k, flat.size(-1)}).reshape({T * k, flat.size(-1)});
  const auto inputs = permuted_rows(repeated, order, back).split_with_sizes(sizes);
  std::vector<at::Tensor> gate_ups;
  for (int64_t e = 0; e < E; ++e)
    if (sizes[e] > 0)
      gate_ups.push_back(expert_projection(w.gate_up, w.gate_up_bias, LoraTarget::experts_gate_up, e, config,
                                           inputs[e], lora, layer));
  const auto hidden = clamped_swiglu(at::cat(gate_ups), config).split_with_sizes(sizes);
  std::vector<at::Tensor> outputs;  // in the experts' order
  for (int64_t e = 0; e < E; ++e)
    if (sizes[e] > 0)
      outputs.push_back(
          expert_projection(w.down, w.down_bias, LoraTarget::experts_down, e, config, hidden[e], lora, layer));
  // Back in the tokens' order while still in the model dtype, then widened and weighted by one kernel (the same
  // float32 values as widening first, in half the bytes).
  const auto by_assignment = permuted_rows(at::cat(outputs), back, order);
  const auto weighted = by_assignment * routing.weights.reshape({-1, 1}).to(at::kFloat);
  return weighted.view({T, k, flat.size(-1)}).sum(1).to(flat.scalar_type());
}

// Passes whose experts average kExpertsDecodedFrom assignments or more (prefills, log-prob passes, training's forward
// without gradients) decode each chosen expert once into the model dtype and multiply on cuBLAS (experts_in_turn: one
// host synchronisation a layer). The MXFP4 kernel decodes each weight once per tile of 32 or 64 assignments and
// multiplies with mma.sync, which wins only while an expert sees few rows: on an H200, 512-token prefills cross between
// 256 and 512 assignments an expert for gpt-oss-20b and between 128 and 256 for 120b (docs/benchmarks.md, gpt-oss
// prefill).
// CRUCIBLE_MOE_DECODED_FROM=N sets the mean; 0 keeps every pass the kernel serves on the kernel.
std::atomic<int64_t>& decoded_from() {
  static std::atomic<int64_t> mean{[] {
    const char* value = std::getenv("CRUCIBLE_MOE_DECODED_FROM");
    return value ? std::max<int64_t>(0, std::atoll(value)) : kExpertsDecodedFrom;
  }()};
  return mean;
}

}  // namespace

void set_experts_decoded_from(int64_t mean) {
  decoded_from().store(mean < 0 ? kExpertsDecodedFrom : mean, std::memory_order_relaxed);
}

bool experts_run_on_device(const MoeWeights& w, const at::Tensor& x, int64_t assignments) {
  const auto products = expert_products_for(x, x.scalar_type());
  const int64_t decoded = decoded_from().load(std::memory_order_relaxed);
  if (decoded > 0 && w.gate_up.packed() && assignments >= decoded * w.gate_up.blocks.size(0)) return false;
  return !at::GradMode::is_enabled() && w.gate_up.packed() && w.down.packed() &&
         expert_gemv_serves(x, w.gate_up.blocks, w.gate_up.scales, assignments, products) &&
         expert_gemv_serves(x, w.down.blocks, w.down.scales, assignments, products);
}

namespace {

// The router's logits for flat [T, hidden], with the adapter's delta. One row goes through the one-row kernel.
at::Tensor router_logits_of(const MoeWeights& w, const at::Tensor& flat, const LoraAdapter* lora, int64_t layer) {
  auto logits = small_linear_serves(flat, w.router, w.router_bias) ? small_linear(flat, w.router, w.router_bias, {})
                                                                   : at::linear(flat, w.router, w.router_bias);
  return lora ? lora->plus_deltas(layer, flat, logits, {{LoraTarget::router, logits.size(-1)}}) : logits;
}

}  // namespace

at::Tensor moe_forward(const MoeWeights& w, const MoeConfig& config, const at::Tensor& x, const LoraAdapter* lora,
                       int64_t layer, const at::Tensor& residual, const at::Tensor& router_logits) {
  const auto flat = x.reshape({-1, x.size(-1)});
  const auto logits = router_logits.defined() ? router_logits.reshape({-1, router_logits.size(-1)})
                                              : router_logits_of(w, flat, lora, layer);
  const auto routing = route_tokens(logits, config.experts_per_token);
  if (auto on_device = experts_on_device(w, config, flat, routing, lora, layer, residual))
    return on_device->view(x.sizes());
  const auto out = experts_in_turn(w, config, flat, routing, lora, layer).view(x.sizes());
  return residual.defined() ? residual + out : out;
}

}  // namespace crucible::lm

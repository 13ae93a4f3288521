#include "lm/model/flash_sink_attention.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string_view>

#if CRUCIBLE_FLASH_WINDOWS
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>
#endif

namespace crucible::lm {
namespace {

std::atomic<bool>& switched_on() {
  static std::atomic<bool> on{[] {
    const char* value = std::getenv("CRUCIBLE_FLASH_SINKS");
    return value == nullptr || std::string_view(value) != "0";
  }()};
  return on;
}

#if CRUCIBLE_FLASH_WINDOWS
// The kernel's window: a query at position t sees keys t - left .. t.
std::optional<int64_t> left_of(int64_t window) {
  return window > 0 ? std::optional<int64_t>(window - 1) : std::nullopt;
}
std::optional<int64_t> right_of(int64_t window) { return window > 0 ? std::optional<int64_t>(0) : std::nullopt; }

class FlashSinks : public torch::autograd::Function<FlashSinks> {
 public:
  // sinks: an optional, not an undefined tensor, which apply() cannot place on a device.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const std::optional<at::Tensor>& sinks, double scale,
                            int64_t window) {
    const int64_t T = q.size(1);
    auto [o, lse, rng_state, unused, debug_mask] = at::_flash_attention_forward(
        q, k, v, std::nullopt, std::nullopt, T, T, 0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale,
        left_of(window), right_of(window));
    at::Tensor out = o, factor;
    if (sinks) {
      auto sinked = sinked_rows(o, lse, sinks->detach());
      out = sinked.out, factor = sinked.factor;
    }
    ctx->save_for_backward({q, k, v, out, lse, rng_state, unused, factor, sinks.value_or(at::Tensor())});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto &rng_state = saved[5], &unused = saved[6], &factor = saved[7], &sinks = saved[8];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt(), T = q.size(1);
    const auto g = grads[0].contiguous();
    // The gradient of o is f G; the output o f stands in for o (see the header).
    const auto d_o = factor.defined() ? kernel_output_gradient(g, factor) : g;
    auto [dq, dk, dv] = at::_flash_attention_backward(d_o, q, k, v, out, lse, at::Tensor(), at::Tensor(), T, T, 0.0,
                                                      /*is_causal=*/true, rng_state, unused, scale, left_of(window),
                                                      right_of(window));
    at::Tensor d_sinks;
    if (factor.defined() && ctx->needs_input_grad(3)) d_sinks = sink_gradient(g, out, factor, sinks.scalar_type());
    return {dq, dk, dv, d_sinks, at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

SinkedRows sinked_rows(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& sinks) {
  const auto wide = at::promote_types(o.scalar_type(), at::kFloat);
  const int64_t T = o.size(1);
  const auto rows = lse.narrow(-1, 0, T).to(wide);  // [B, H, T]
  const auto factor = at::sigmoid(rows - sinks.to(wide).view({1, -1, 1})).transpose(1, 2).unsqueeze(-1);
  return {(o.to(wide) * factor).to(o.scalar_type()), factor};
}

at::Tensor kernel_output_gradient(const at::Tensor& grad, const at::Tensor& factor) {
  return (grad.to(factor.scalar_type()) * factor).to(grad.scalar_type());
}

at::Tensor sink_gradient(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& factor,
                         c10::ScalarType dtype) {
  const auto wide = factor.scalar_type();
  const auto g_out = (grad.to(wide) * out.to(wide)).sum(-1, /*keepdim=*/true);  // G . o f
  return (-((1.0 - factor) * g_out).sum({0, 1, 3})).to(dtype);
}

bool flash_sink_attention_serves(const at::Tensor& queries, const at::Tensor& keys) {
#if CRUCIBLE_FLASH_WINDOWS
  const auto dtype = queries.scalar_type();
  const int64_t D = queries.size(-1);
  return switched_on().load(std::memory_order_relaxed) && queries.is_cuda() && queries.dim() == 4 &&
         keys.dim() == 4 && (dtype == at::kBFloat16 || dtype == at::kHalf) && keys.scalar_type() == dtype &&
         D % 8 == 0 && D <= 256 && keys.size(-1) == D && keys.size(2) > 0 && queries.size(2) % keys.size(2) == 0 &&
         at::cuda::getDeviceProperties(queries.get_device())->major >= 8;
#else
  (void)queries, (void)keys;
  return false;
#endif
}

void set_flash_sink_attention(bool on) { switched_on().store(on, std::memory_order_relaxed); }

at::Tensor flash_sink_attention(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                                const at::Tensor& sinks, double scale, int64_t window) {
#if CRUCIBLE_FLASH_WINDOWS
  const int64_t B = queries.size(0), T = queries.size(1), H = queries.size(2), D = queries.size(3);
  const auto sink_logits = sinks.defined() ? std::optional<at::Tensor>(sinks) : std::nullopt;
  try {
    return FlashSinks::apply(queries.contiguous(), keys.contiguous(), values.contiguous(), sink_logits, scale, window)
        .reshape({B, T, H * D});
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the caller's to handle, as any other pass's
  } catch (const c10::Error&) {
    // A build of the kernel without windows, or a shape it refuses: the masked path from now on.
    set_flash_sink_attention(false);
    return {};
  }
#else
  (void)queries, (void)keys, (void)values, (void)sinks, (void)scale, (void)window;
  return {};
#endif
}

}  // namespace crucible::lm

#include "lm/training/block_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <ATen/core/grad_mode.h>

namespace crucible::lm {
namespace {

// The block's computation, kept with the autograd node (its context holds saved values as IValues).
struct Block : torch::CustomClassHolder {
  explicit Block(std::function<at::Tensor(const at::Tensor&)> f) : fn(std::move(f)) {}
  std::function<at::Tensor(const at::Tensor&)> fn;
};

struct Recompute : torch::autograd::Function<Recompute> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const c10::intrusive_ptr<Block>& block) {
    // Saved as a plain value, not for backward: the input is read again as it was, and the version check that
    // save_for_backward adds would refuse the in-place writes of the block's KV cache.
    ctx->saved_data["x"] = x;
    ctx->saved_data["block"] = c10::IValue::make_capsule(block);
    return block->fn(x);  // without gradients: autograd runs forward() with grad mode off
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto block = c10::static_intrusive_pointer_cast<Block>(ctx->saved_data["block"].toCapsule());
    at::Tensor x = ctx->saved_data["x"].toTensor().detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode with_gradients(true);
      y = block->fn(x);
    }
    // Accumulates into the parameters the block read (the adapter's), as the kept graph would have.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> fn) {
  return Recompute::apply(x, c10::make_intrusive<Block>(std::move(fn)));
}

}  // namespace crucible::lm

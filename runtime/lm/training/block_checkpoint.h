#pragma once
// Activation checkpointing for one transformer block: the forward pass keeps only the block's input; the backward
// pass runs the block again, with gradients, to get what it needs. Memory for a training micro-batch then grows with
// one block's activations instead of all of them, for about one more forward pass of compute.
#include <ATen/core/Tensor.h>

#include <functional>

namespace crucible::lm {

// fn(x) with its activations recomputed in the backward pass. fn must compute the same thing when run again: no
// dropout (or other randomness), and no state it changes in a way that alters a second run. Gradients reach every
// tensor fn reads that requires them (the adapter's parameters) and x.
at::Tensor checkpointed(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> fn);

}  // namespace crucible::lm

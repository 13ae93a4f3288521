#pragma once
// gpt-oss's mixture-of-experts MLP: a biased linear router scores every expert, the top k are kept and their logits
// softmaxed; each chosen expert runs a clamped SwiGLU whose gate and linear columns are interleaved
// (gate = min(g, limit), linear = clamp(l, -limit, limit), out = (linear + 1) * gate * sigmoid(alpha * gate)), with
// biases, and the outputs are summed with the routing weights. Expert matrices stay as stored (MXFP4 or dense) and
// are expanded one expert at a time, only for the experts some token chose.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <vector>

#include "lm/format/model_config.h"

namespace crucible::lm {

// One projection of every expert, [E, rows, cols] in a linear layer's (out, in) layout: dense, or MXFP4 blocks
// [E, rows, cols / 32, 16] with their codes in the kernels' paired order (mxfp4.h) and scales [E, rows, cols / 32].
struct ExpertMatrix {
  at::Tensor dense;
  at::Tensor blocks, scales;
  bool packed() const { return blocks.defined(); }
  at::Tensor expert(int64_t e, c10::ScalarType dtype) const;  // [rows, cols]
  int64_t rows() const;
  int64_t cols() const;
};

// Whether a dense expert tensor of this shape is stored [E, out, in] (a linear layer's layout). transformers stores
// gpt-oss's experts [E, in, out] (x @ W); where in == out the shape cannot tell, and that layout is assumed.
bool experts_stored_out_in(const std::vector<int64_t>& shape, int64_t experts, int64_t out, int64_t in);

struct MoeWeights {
  at::Tensor router, router_bias;  // [E, hidden], [E]
  ExpertMatrix gate_up;            // [E, 2 I, hidden]: rows alternate gate, linear
  at::Tensor gate_up_bias;         // [E, 2 I]
  ExpertMatrix down;               // [E, hidden, I]
  at::Tensor down_bias;            // [E, hidden]
  bool defined() const { return router.defined(); }
};

struct Routing {
  at::Tensor experts;  // [N, k] int64: the chosen experts of each token
  at::Tensor weights;  // [N, k]: softmax over the chosen k logits
};

// router_logits [N, E] -> the top k experts and their weights.
Routing route_tokens(const at::Tensor& router_logits, int64_t k);

// The clamped, interleaved SwiGLU: gate_up [N, 2 I] -> [N, I].
at::Tensor clamped_swiglu(const at::Tensor& gate_up, const MoeConfig& config);

class LoraAdapter;

// Whether a step of `assignments` (tokens x experts per token) with inputs like `x` (its device and dtype) runs its
// experts on the device kernel (moe_kernels.h), with no host synchronisation: packed experts the kernel takes, no
// gradients recorded (the kernel has no backward pass), and few enough assignments an expert: a pass whose experts
// average more decodes them and multiplies on cuBLAS (moe.cpp says where the line is and why).
bool experts_run_on_device(const MoeWeights& w, const at::Tensor& x, int64_t assignments);

// Where that line is by default, as a mean of assignments an expert (moe.cpp says why).
inline constexpr int64_t kExpertsDecodedFrom = 256;

// Where that line is for the process: 0 keeps every pass the kernel serves on the kernel; a negative mean restores
// kExpertsDecodedFrom (CRUCIBLE_MOE_DECODED_FROM sets the starting value).
void set_experts_decoded_from(int64_t mean);

// x [..., hidden] (normalised) -> [..., hidden], the experts' weighted sum, plus `residual` (x's shape) where given
// (on the device kernels, in the same kernel as the sum). `lora` (may be null) adds its router and expert deltas of
// `layer`. `router_logits` [..., E]: the router's output for x where the caller made it (the one-row kernel that also
// normalised x), with the adapter's delta; undefined: made here.
at::Tensor moe_forward(const MoeWeights& w, const MoeConfig& config, const at::Tensor& x, const LoraAdapter* lora,
                       int64_t layer, const at::Tensor& residual = {}, const at::Tensor& router_logits = {});

}  // namespace crucible::lm

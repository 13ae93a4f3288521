#pragma once
// The decoder-only transformer of the Qwen2, Llama, Qwen3 and gpt-oss families, in LibTorch: embedding, N blocks of
// (RMSNorm -> grouped-query attention with rotary positions -> residual, RMSNorm -> SwiGLU MLP -> residual),
// a final RMSNorm and the LM head (tied to the embedding or not). Qwen3 normalises each head's query and key before
// the rotation; gpt-oss adds attention sinks, sliding-window layers and a mixture of experts (moe.h) in place of
// the MLP. The same code runs on the CPU in float32 and on CUDA in bfloat16.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "lm/format/model_config.h"
#include "lm/model/kv_cache.h"
#include "lm/model/moe.h"
#include "lm/model/rotary.h"

namespace crucible::lm {

class ModelFiles;
class LoraAdapter;
class WeightReader;

struct LoadOptions {
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;  // weights and activations; norms and softmax still accumulate in float32
  // Benchmarks of shapes whose weights are not at hand: only the directory's config.json is read, and the weights
  // are drawn with this seed on the device (RandomWeights in transformer.cpp).
  std::optional<uint64_t> random_seed;
};

// The weights of one block. q, k and v are stored fused (one matmul), as are gate and up.
struct BlockWeights {
  at::Tensor input_norm, post_attention_norm;
  at::Tensor qkv, qkv_bias;  // [ (H + 2 Hkv) D, hidden ]; bias undefined without attention_bias
  at::Tensor o, o_bias;
  at::Tensor q_norm, k_norm;  // [D], Qwen3's per-head norms; undefined otherwise
  at::Tensor sinks;           // [H], gpt-oss's sink logits; undefined otherwise
  at::Tensor gate_up, gate_up_bias;  // [ 2 I, hidden ]; undefined with experts
  at::Tensor down, down_bias;
  MoeWeights moe;  // gpt-oss's router and experts in place of gate_up and down
};

struct ModelWeights {
  at::Tensor embed;  // [V, hidden]
  std::vector<BlockWeights> blocks;
  at::Tensor final_norm;
  at::Tensor lm_head;  // [V, hidden]; the same storage as `embed` when tied
};

// Where the T new tokens of a forward pass sit, and what they may see.
struct AttentionInputs {
  at::Tensor positions;  // [B, T] int64: rotary positions (per row; left-padded rows start later)
  at::Tensor slots;      // [T] int64: the cache slots the new keys and values are written to
  at::Tensor mask;       // [B, 1, T, visible] bool: true where a query may attend to a cache slot
  int64_t visible = 0;   // attention reads cache slots [0, visible)
  // Whole sequences from slot 0 whose valid tokens are a prefix of each row (right padding): causal attention alone
  // is then exact at every valid token, and a fused causal kernel can replace the mask (padding queries differ, and
  // nothing reads them).
  bool causal_prefix = false;
  // A decode step (one token per row) with no mask: the decode attention kernels read these [B, capacity] bool valid
  // slots and `slots`' one slot themselves.
  at::Tensor key_valid;
  // Such a decode step, for queries of `tokens` per row.
  bool fused_decode(int64_t tokens) const { return tokens == 1 && key_valid.defined() && !mask.defined(); }
};

// A causal mask over cache slots: query t (at slot query_slots[t]) sees slot s when s <= its slot and
// key_valid[b, s] (padding is invalid), and always sees its own slot so a padding query has one finite key.
at::Tensor causal_mask(const at::Tensor& query_slots, const at::Tensor& key_valid, int64_t visible);

// Whole right-padded sequences in a fresh cache of their length: slot t holds position t; valid [B, T] bool marks
// the real tokens.
AttentionInputs whole_sequences(const at::Tensor& valid);

class Transformer {
 public:
  static Transformer load(const std::filesystem::path& model_dir, const LoadOptions& options = {});
  static Transformer from_files(const ModelConfig& config, const ModelFiles& files, const LoadOptions& options);
  static Transformer from_weights(const ModelConfig& config, const WeightReader& read, const LoadOptions& options);
  // The same weights (the same tensors, not copies), with no adapter in use or folded and its own rotary tables.
  Transformer sharing_weights() const;

  // tokens [B, T] int64 -> final hidden states [B, T, hidden]; writes the new keys and values into `cache`.
  at::Tensor hidden_states(const at::Tensor& tokens, const AttentionInputs& attention, KvCache& cache) const;
  // hidden [..., hidden] -> logits [..., V] in float32.
  at::Tensor logits(const at::Tensor& hidden) const;
  // The same in the model's dtype, as the projection writes them (the fused sampler reads them so: no float32 copy).
  at::Tensor logits_in_model_dtype(const at::Tensor& hidden) const;
  // Logits of every position of unpadded sequences of one length, no cache kept: tokens [B, T] -> [B, T, V].
  at::Tensor forward_full(const at::Tensor& tokens) const;

  KvCache make_cache(int64_t batch, int64_t capacity) const;
  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  const ModelWeights& weights() const { return weights_; }
  const RotaryTable& rotary() const { return rotary_; }
  // Rotary tables must cover every position a forward pass will use (CUDA graphs cannot grow them).
  void reserve_positions(int64_t n) const { rotary_.reserve(n); }

  // Forward passes add this adapter's deltas while it is enabled (nullptr: the base model). Not owned.
  void use_adapter(const LoraAdapter* adapter) const { adapter_ = adapter; }
  const LoraAdapter* adapter() const { return adapter_; }
  // While on, forward passes that record gradients keep only each block's input and recompute the block in the
  // backward pass (block_checkpoint.h): a training micro-batch needs one block's activations, not all of them.
  void set_activation_checkpointing(bool on) const { checkpoint_blocks_ = on; }
  bool activation_checkpointing() const { return checkpoint_blocks_; }

  // Adds (sign +1) or removes (sign -1) scale * B A to the base weights, for sampling without the extra matmuls: in
  // place, so every model sharing these weights (sharing_weights) sees it. Policies fold instead (fold_adapter).
  // Removing restores the weights up to rounding in the model dtype. Throws std::invalid_argument for an adapter on
  // gpt-oss's router or experts (the experts stay packed: their deltas are added in each pass instead).
  void merge_adapter(const LoraAdapter& adapter, int sign = +1);

  // Folds `adapter`'s current values into a copy of the weights it adapts (W + scale * B A, rounded once to the model
  // dtype): while it is the enabled adapter in use, forward passes read that copy and add no deltas, so a decode step
  // runs the base model's kernels. The copy keeps its addresses from one fold to the next (CUDA graphs read it); fold
  // again after the adapter changes. nullptr ends it. For inference only: no gradient reaches a folded adapter.
  // Returns false, with nothing folded and the copy freed, where the device has no memory for the copy: forward
  // passes then add the deltas as before. Also false, with nothing folded, for an adapter on the router or experts.
  bool fold_adapter(const LoraAdapter* adapter) const;
  bool adapter_folded() const;

  // Whether a step of `tokens` tokens, without gradients, finds its experts without a host synchronisation, as a CUDA
  // graph needs: no mixture of experts, or packed experts that the device kernel takes (moe_kernels.h).
  bool experts_stay_on_device(int64_t tokens) const;

 private:
  // Each normalises `residual` with `norm`, and returns `residual` plus its output: the output projection's GEMM adds
  // the residual itself.
  at::Tensor attention_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm,
                             const AttentionInputs& attention, const at::Tensor& cos, const at::Tensor& signed_sin,
                             at::Tensor& k_cache, at::Tensor& v_cache) const;
  at::Tensor mlp_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm) const;
  at::Tensor moe_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm) const;  // mlp_block's MoE
  // Queries [B, T, H, D] against the cache in plain ops: sinks, sliding windows (attention_block's fallback).
  at::Tensor sink_or_window_attention(int64_t layer, const at::Tensor& queries, const AttentionInputs& attention,
                                      const at::Tensor& k_cache, const at::Tensor& v_cache) const;
  // Whether a layer's attention needs that fallback (the fused kernels and SDPA take neither sinks nor windows).
  bool plain_attention(int64_t layer) const;
  // A decode step's attention [B, 1, H * D] from its unrotated q/k/v row, the rotation done by the attention kernel
  // (rotate_and_attend), which also writes the step's key and value into the caches; undefined where it does not serve.
  at::Tensor rotated_in_attention(int64_t layer, const at::Tensor& qkv, const AttentionInputs& attention,
                                  at::Tensor& k_cache, at::Tensor& v_cache) const;
  double attention_scale() const;           // 1 / sqrt(head_dim)
  int64_t window_of(int64_t layer) const;  // the layer's sliding window, 0 for full attention
  // rms_norm(x, norm) W^T (+ bias): one kernel where the one-row kernel takes it and no adapter needs the normalised
  // input; otherwise `normed` gets that input.
  at::Tensor normed_projection(const at::Tensor& x, const at::Tensor& norm, const at::Tensor& weight,
                               const at::Tensor& bias, at::Tensor& normed) const;
  // One whole block: attention and MLP, each with its norm and residual.
  at::Tensor block(int64_t layer, const at::Tensor& x, const AttentionInputs& attention, const at::Tensor& cos,
                   const at::Tensor& signed_sin, at::Tensor& k_cache, at::Tensor& v_cache) const;
  const LoraAdapter* active_adapter() const;  // the adapter whose deltas forward passes add (none while folded)
  const BlockWeights& block_weights(int64_t layer) const;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;

  ModelConfig config_;
  LoadOptions options_;
  ModelWeights weights_;
  mutable RotaryTable rotary_;
  mutable const LoraAdapter* adapter_ = nullptr;
  mutable const LoraAdapter* folded_ = nullptr;
  mutable std::vector<BlockWeights> folded_blocks_;  // the base's tensors, but adapted matrices folded
  mutable bool checkpoint_blocks_ = false;
};

}  // namespace crucible::lm

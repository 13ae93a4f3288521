#pragma once
// LoRA adapters on the transformer's linear layers (q, k, v, o, gate, up, down) and on gpt-oss's router and experts
// (as PEFT's target_parameters adapts them: per expert e, W_e + scale * B_e A_e): W x + scale * B (A dropout(x)),
// with the base weights frozen. The adapter can be switched off per forward pass (the base model, for a KL
// penalty without a second copy), merged into the weights for fast sampling, and saved or loaded in PEFT's
// format (adapter_config.json + adapter_model.safetensors with PEFT's key names).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "lm/model/lora_config.h"
#include "lm/format/model_config.h"

namespace crucible::lm {

// One adapted layer: A [rank, in], B [out, rank]. Experts, as PEFT stores them: A [E * rank, in] with expert e's
// rows at [e * rank, (e + 1) * rank), B [out, rank * E] with expert e's columns at e, E + e, 2 E + e, ...
// rank and scale are this layer's own: PEFT's rank_pattern / alpha_pattern give layers different ones.
struct LoraPair {
  at::Tensor a, b;
  int64_t rank = 0;
  double scale = 1.0;  // alpha / rank (or alpha / sqrt(rank)) with this layer's rank and alpha
};

class LoraAdapter {
 public:
  // PEFT's initialisation: A Kaiming-uniform (a = sqrt(5)), B zero, so a fresh adapter changes nothing. Each
  // layer's rank and alpha follow config.rank_pattern / alpha_pattern (lora_pattern.h); a bad key or rank throws
  // std::invalid_argument.
  static LoraAdapter create(const ModelConfig& model, const LoraConfig& config, c10::Device device,
                            c10::ScalarType dtype, uint64_t seed);
  // Throws ModelFormatError for a missing or mismatched adapter (wrong rank, shape or module), or a malformed
  // rank_pattern / alpha_pattern (naming the key).
  static LoraAdapter load_peft(const std::filesystem::path& dir, const ModelConfig& model, c10::Device device,
                               c10::ScalarType dtype);
  // Writes the config's rank_pattern / alpha_pattern as they are, so the file loads back to the same ranks and scales.
  void save_peft(const std::filesystem::path& dir, const std::string& base_model = "") const;

  // scale * B (A dropout(x)) for one layer and target, or an undefined tensor when it is not adapted.
  at::Tensor delta(int64_t layer, LoraTarget target, const at::Tensor& x) const;
  // out + the deltas of `targets`, which sit side by side (of the given widths) in out's last dimension, as a
  // fused projection (q, k, v; gate, up) lays them out. Without dropout every target reads the same x: their A
  // matrices are stacked into one product, and their scaled B matrices into one block-diagonal matrix whose product
  // is added into `out` by the GEMM itself, instead of a delta per target, a concatenation and an addition.
  at::Tensor plus_deltas(int64_t layer, const at::Tensor& x, const at::Tensor& out,
                         std::initializer_list<std::pair<LoraTarget, int64_t>> targets) const;
  // out + expert `expert`'s (of `experts`) delta of an expert target on x [n, in]; out unchanged when not adapted.
  at::Tensor plus_expert_delta(int64_t layer, LoraTarget target, int64_t expert, int64_t experts, const at::Tensor& x,
                               const at::Tensor& out) const;
  // Every assignment's delta of an expert target at once, the experts found on the device: x [A, in] (row a is
  // assignment a's input), experts [A] int64 -> [A, out] (scale * B_e A_e x_a with e = experts[a]), or an undefined
  // tensor when the target is not adapted. The same values as plus_expert_delta row by row.
  at::Tensor expert_deltas(int64_t layer, LoraTarget target, const at::Tensor& experts, int64_t num_experts,
                           const at::Tensor& x) const;
  bool adapts_parameters() const;  // the router or experts of some layer (these cannot be folded or merged)
  const LoraPair* find(int64_t layer, LoraTarget target) const;
  std::vector<at::Tensor> parameters() const;  // every A and B, in a fixed order
  LoraAdapter clone() const;                   // a deep copy (for a per-task fork)
  void copy_from(const LoraAdapter& other);    // values into this adapter's own tensors (an optimizer keeps them)

  const LoraConfig& config() const { return config_; }
  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }
  bool training() const { return training_; }
  void set_training(bool on) { training_ = on; }  // dropout only while training

 private:
  LoraConfig config_;
  int64_t layers_ = 0;
  std::vector<std::optional<LoraPair>> pairs_;  // [layer * kLoraTargetCount + target]
  bool enabled_ = true;
  bool training_ = false;
};

}  // namespace crucible::lm

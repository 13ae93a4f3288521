#pragma once
// What a LoRA adapter adapts and how strongly: plain values, no torch.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crucible::lm {

// The linear layers (PEFT's target_modules: q_proj ... down_proj), then gpt-oss's parameters that PEFT adapts
// through target_parameters: the router's weight and each expert's gate/up and down projections.
enum class LoraTarget { q, k, v, o, gate, up, down, router, experts_gate_up, experts_down };
constexpr std::array<LoraTarget, 7> kLoraTargets = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,   LoraTarget::o,
                                                     LoraTarget::gate, LoraTarget::up, LoraTarget::down};
constexpr std::array<LoraTarget, 3> kLoraParameterTargets = {LoraTarget::router, LoraTarget::experts_gate_up,
                                                             LoraTarget::experts_down};
constexpr std::size_t kLoraTargetCount = kLoraTargets.size() + kLoraParameterTargets.size();
bool is_parameter_target(LoraTarget t);  // router or experts: PEFT's target_parameters
// q_proj, ..., down_proj (PEFT's target_modules names); mlp.router.weight, mlp.experts.gate_up_proj,
// mlp.experts.down_proj (its target_parameters names).
const char* lora_module_name(LoraTarget t);
// A module or parameter name to its target; a parameter may be named by any dotted suffix ("experts.down_proj").
std::optional<LoraTarget> lora_target_named(const std::string& name);
// Names to targets; throws std::invalid_argument naming an unknown one.
std::vector<LoraTarget> lora_targets_named(const std::vector<std::string>& module_names);
// The full name PEFT matches rank_pattern and alpha_pattern keys against: the module's path in the Hugging Face
// model ("model.layers.3.self_attn.q_proj", "model.layers.3.mlp.down_proj"), or for a parameter target the
// parameter's path ("model.layers.3.mlp.router.weight", "model.layers.3.mlp.experts.gate_up_proj").
std::string lora_module_path(int64_t layer, LoraTarget t);

// One entry of PEFT's rank_pattern / alpha_pattern: a regular expression over a module's full name, and the rank
// or alpha of the modules it matches instead of r / lora_alpha.
struct LoraRankOverride {
  std::string key;
  int64_t rank = 0;
};
struct LoraAlphaOverride {
  std::string key;
  double alpha = 0;
};

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;  // scale alpha / sqrt(rank) instead of alpha / rank
  std::vector<LoraTarget> targets = {kLoraTargets.begin(), kLoraTargets.end()};
  // Per-module overrides, in the config's order (for a module several keys match, the first one listed wins);
  // empty: every module has rank and alpha. See lora_pattern.h for how a key matches.
  std::vector<LoraRankOverride> rank_pattern;
  std::vector<LoraAlphaOverride> alpha_pattern;
  double scale() const;  // of a module no pattern names
  // alpha / rank, or alpha / sqrt(rank) with rsLoRA, for a module of its own rank and alpha.
  double scale_of(int64_t module_rank, double module_alpha) const;
};

}  // namespace crucible::lm

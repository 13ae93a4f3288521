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

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;  // scale alpha / sqrt(rank) instead of alpha / rank
  std::vector<LoraTarget> targets = {kLoraTargets.begin(), kLoraTargets.end()};
  double scale() const;
};

}  // namespace crucible::lm

#pragma once
// What a LoRA adapter adapts and how strongly: plain values, no torch.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crucible::lm {

enum class LoraTarget { q, k, v, o, gate, up, down };
constexpr std::array<LoraTarget, 7> kLoraTargets = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,   LoraTarget::o,
                                                     LoraTarget::gate, LoraTarget::up, LoraTarget::down};
const char* lora_module_name(LoraTarget t);  // q_proj, ..., down_proj (PEFT's target_modules names)
std::optional<LoraTarget> lora_target_named(const std::string& module_name);
// Module names to targets; throws std::invalid_argument naming an unknown one.
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

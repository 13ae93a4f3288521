#pragma once
// PEFT's rank_pattern and alpha_pattern: which rank and alpha one adapted module (or parameter) takes.
//
// PEFT (src/peft/utils/other.py, get_pattern_key; used by LoraModel._create_and_replace in tuners/lora/model.py)
// tries the keys in the dict's order and takes the first for which re.match(rf"(.*\.)?({key})$", name) succeeds on
// the module's full name (lora_module_path): the key, a regular expression, must match the whole name or a suffix of
// it that starts right after a dot ("q_proj", "layers.3.self_attn.q_proj", "^model.layers.0.mlp.up_proj"). A module
// no key matches takes r and lora_alpha; a key that matches no module is ignored (PEFT checks nothing there: its
// test_rank_and_alpha_pattern_no_matching_keys expects exactly that). The two patterns are looked up separately,
// so a module can take its rank from one key and its alpha from another (or from lora_alpha).
//
// The keys are compiled as ECMAScript regular expressions (std::regex), which agree with Python's re on the syntax
// such keys use (literals, ., ^, $, *, +, ?, [], (), |, \d); Python-only syntax ((?P<name>...), lookbehind) is
// refused as invalid.
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "lm/model/lora_config.h"

namespace crucible::lm {

// A module's resolved settings.
struct LoraModuleSettings {
  int64_t rank = 0;
  double alpha = 0;
  double scale = 0;  // alpha / rank, or alpha / sqrt(rank) with rsLoRA
};

class LoraPatterns {
 public:
  // Compiles the config's keys once. Throws std::invalid_argument naming a key that is not a valid regular
  // expression, or a rank that is not positive.
  explicit LoraPatterns(const LoraConfig& config);
  LoraModuleSettings settings_of(const std::string& module_path) const;

 private:
  // The index of the first key that matches the module, or -1.
  static int64_t first_match(const std::vector<std::regex>& keys, const std::string& module_path);

  LoraConfig config_;
  std::vector<std::regex> rank_keys_, alpha_keys_;
};

// PEFT's match of one key against one full name, compiled anew (for tests and one-off checks).
bool lora_pattern_matches(const std::string& key, const std::string& module_path);

}  // namespace crucible::lm

#include "lm/model/lora_pattern.h"

#include <stdexcept>

namespace crucible::lm {
namespace {

// PEFT's rf"(.*\.)?({key})$" under re.match: the whole name, or the part after some dot, is the key. std::regex_match
// anchors both ends, which is what re.match plus "$" does on a name without newlines.
// PEFT's keys are module names or short expressions over them. A longer one is refused before std::regex, whose
// recursive matcher a hostile expression could drive past the stack.
constexpr std::size_t kMaxKeyBytes = 256;

std::regex compile_key(const std::string& key, const char* pattern_name) {
  if (key.size() > kMaxKeyBytes)
    throw std::invalid_argument(std::string(pattern_name) + " key '" + key.substr(0, 40) + "...' is longer than " +
                                std::to_string(kMaxKeyBytes) + " bytes");
  try {
    return std::regex("(.*\\.)?(" + key + ")", std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(std::string(pattern_name) + " key '" + key + "' is not a valid regular expression (" +
                                e.what() + ")");
  }
}

}  // namespace

bool lora_pattern_matches(const std::string& key, const std::string& module_path) {
  return std::regex_match(module_path, compile_key(key, "pattern"));
}

LoraPatterns::LoraPatterns(const LoraConfig& config) : config_(config) {
  for (const auto& entry : config.rank_pattern) {
    if (entry.rank <= 0)
      throw std::invalid_argument("rank_pattern key '" + entry.key + "': the rank must be a positive integer, not " +
                                  std::to_string(entry.rank));
    rank_keys_.push_back(compile_key(entry.key, "rank_pattern"));
  }
  for (const auto& entry : config.alpha_pattern) alpha_keys_.push_back(compile_key(entry.key, "alpha_pattern"));
}

int64_t LoraPatterns::first_match(const std::vector<std::regex>& keys, const std::string& module_path) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    try {
      if (std::regex_match(module_path, keys[i])) return static_cast<int64_t>(i);
    } catch (const std::regex_error& e) {  // a key too complex to match (error_complexity, error_stack)
      throw std::invalid_argument("pattern key " + std::to_string(i) + " cannot be matched against " + module_path +
                                  " (" + e.what() + ")");
    }
  }
  return -1;
}

LoraModuleSettings LoraPatterns::settings_of(const std::string& module_path) const {
  LoraModuleSettings s{config_.rank, config_.alpha, 0};
  if (const auto i = first_match(rank_keys_, module_path); i >= 0) s.rank = config_.rank_pattern[i].rank;
  if (const auto i = first_match(alpha_keys_, module_path); i >= 0) s.alpha = config_.alpha_pattern[i].alpha;
  s.scale = config_.scale_of(s.rank, s.alpha);
  return s;
}

}  // namespace crucible::lm

#pragma once
// Pre-tokenization: zero or more regex Split steps, then ByteLevel (optionally with its own GPT-2 split).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/split_pattern.h"

namespace crucible::lm {

struct ByteLevelOptions {
  bool add_prefix_space = false;  // prepend ' ' to each piece that does not start with one
  bool use_regex = true;          // split with the GPT-2 pattern
};

struct PreTokenizer {
  std::vector<SplitPattern> splits;  // applied in order, each with "Isolated" behaviour
  ByteLevelOptions byte_level;

  // Calls `emit` with each non-empty pre-token, as raw bytes (the byte-level spelling is the model's job).
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit) const;
  std::vector<std::string> pre_tokenize(std::string_view text) const;
};

}  // namespace crucible::lm

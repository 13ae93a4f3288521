#pragma once
// Thread-safe memo of pre-token -> ids. Source code repeats the same pre-tokens constantly.
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lm/tokenizer/token_id.h"

namespace crucible::lm {

class WordCache {
 public:
  static constexpr std::size_t max_entries = 100000;
  static constexpr std::size_t max_word_bytes = 256;

  // Appends the cached ids of `word` to `out`; false when absent.
  bool append(std::string_view word, std::vector<TokenId>& out) const;
  // Stores the ids unless the cache is full or the word is long.
  void insert(std::string_view word, const TokenId* ids, std::size_t count);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<TokenId>> entries_;
};

}  // namespace crucible::lm

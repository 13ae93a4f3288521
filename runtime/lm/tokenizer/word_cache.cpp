#include "lm/tokenizer/word_cache.h"

namespace crucible::lm {

bool WordCache::append(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() > max_word_bytes) return false;
  const std::string key(word);
  const std::lock_guard lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const TokenId* ids, std::size_t count) {
  if (word.size() > max_word_bytes) return;
  std::string key(word);
  const std::lock_guard lock(mutex_);
  if (entries_.size() >= max_entries) return;
  entries_.try_emplace(std::move(key), ids, ids + count);
}

}  // namespace crucible::lm

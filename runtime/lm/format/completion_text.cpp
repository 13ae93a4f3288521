#include "lm/format/completion_text.h"

#include <algorithm>

#include "lm/tokenizer/utf8.h"

namespace crucible::lm {

CompletionText::CompletionText(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {
  stop_strings_.erase(std::remove(stop_strings_.begin(), stop_strings_.end(), std::string()), stop_strings_.end());
  for (const auto& s : stop_strings_) longest_stop_ = std::max(longest_stop_, s.size());
}

bool CompletionText::append(const std::string& token_bytes) {
  if (stop_at_) return true;
  const std::size_t before = bytes_.size();
  bytes_ += token_bytes;
  // Only a match that ends in the new bytes is new; the earliest one wins.
  const std::size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
  for (const auto& s : stop_strings_) {
    const auto at = bytes_.find(s, from);
    if (at != std::string::npos && (!stop_at_ || at < *stop_at_)) stop_at_ = at;
  }
  return stop_at_.has_value();
}

std::string CompletionText::text() const { return utf8_lossy(stop_at_ ? bytes_.substr(0, *stop_at_) : bytes_); }

}  // namespace crucible::lm

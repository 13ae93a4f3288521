#include "lm/completion_text.h"

#include <algorithm>

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

std::string utf8_lossy(const std::string& bytes) {
  static const std::string replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Expected length and the valid range of the second byte (excludes overlongs and surrogates).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    if (len == 0) {
      out += replacement;
      ++i;
      continue;
    }
    std::size_t j = 1;
    for (; j < len && i + j < n; ++j) {
      const unsigned char b = s[i + j];
      const unsigned char min = j == 1 ? lo : 0x80, max = j == 1 ? hi : 0xBF;
      if (b < min || b > max) break;
    }
    if (j == len) {
      out.append(bytes, i, len);
    } else {
      out += replacement;  // the valid prefix of a broken sequence is replaced as one
    }
    i += j;
  }
  return out;
}

}  // namespace crucible::lm

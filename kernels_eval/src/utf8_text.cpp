#include "crucible/eval/utf8_text.h"

namespace crucible::eval {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// The length of the well-formed sequence starting at text[i], or 0 when none starts there (RFC 3629, table 3-7 of
// the Unicode standard: the second byte's range depends on the first).
std::size_t sequence_length(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = at(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 == 0xE0) n = 3, lo = 0xA0;
  else if (b0 >= 0xE1 && b0 <= 0xEC) n = 3;
  else if (b0 == 0xED) n = 3, hi = 0x9F;  // no surrogates
  else if (b0 >= 0xEE && b0 <= 0xEF) n = 3;
  else if (b0 == 0xF0) n = 4, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) n = 4;
  else if (b0 == 0xF4) n = 4, hi = 0x8F;  // nothing above U+10FFFF
  else return 0;
  if (i + n > text.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (const std::size_t n = sequence_length(text, i)) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return out;
}

std::string valid_utf8_prefix(std::string_view text, std::size_t max_bytes) {
  // Made valid first (a replacement takes three bytes), then cut: the result is never longer than max_bytes.
  std::string valid = valid_utf8(text);
  if (valid.size() <= max_bytes) return valid;
  std::size_t end = max_bytes;
  // Back off over continuation bytes (at most three) so the cut falls before the character they belong to.
  for (int k = 0; k < 3 && end > 0 && (static_cast<unsigned char>(valid[end]) & 0xC0) == 0x80; ++k) --end;
  valid.resize(end);
  return valid;
}

}  // namespace crucible::eval

#include "crucible/eval/utf8_sequence.h"

namespace crucible::eval {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// What a lead byte asks of the bytes after it: how many, and the range of the first (table 3-7 of the Unicode
// standard: it excludes overlong forms, surrogates and code points above U+10FFFF). continuations 0: no lead byte.
struct Lead {
  std::size_t continuations = 0;
  char32_t payload = 0;
  unsigned char second_low = 0x80, second_high = 0xBF;
};

Lead lead_of(unsigned char byte) {
  if (byte >= 0xC2 && byte <= 0xDF) return {1, static_cast<char32_t>(byte & 0x1F)};
  if (byte >= 0xE0 && byte <= 0xEF)
    return {2, static_cast<char32_t>(byte & 0x0F), static_cast<unsigned char>(byte == 0xE0 ? 0xA0 : 0x80),
            static_cast<unsigned char>(byte == 0xED ? 0x9F : 0xBF)};
  if (byte >= 0xF0 && byte <= 0xF4)
    return {3, static_cast<char32_t>(byte & 0x07), static_cast<unsigned char>(byte == 0xF0 ? 0x90 : 0x80),
            static_cast<unsigned char>(byte == 0xF4 ? 0x8F : 0xBF)};
  return {};
}

}  // namespace

Utf8Step read_utf8(std::string_view bytes, std::size_t pos) {
  const auto first = static_cast<unsigned char>(bytes[pos]);
  if (first < 0x80) return {first, 1, true};
  const Lead lead = lead_of(first);
  if (lead.continuations == 0) return {0, 1, false};
  char32_t code_point = lead.payload;
  for (std::size_t i = 1; i <= lead.continuations; ++i) {
    // Stopping at the first byte that cannot continue makes `i` the maximal subpart's length.
    if (pos + i >= bytes.size()) return {0, i, false};
    const char next = bytes[pos + i];
    const auto byte = static_cast<unsigned char>(next);
    const bool fits = i == 1 ? byte >= lead.second_low && byte <= lead.second_high : is_utf8_continuation(next);
    if (!fits) return {0, i, false};
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  return {code_point, lead.continuations + 1, true};
}

Utf8Step read_utf8_before(std::string_view bytes, std::size_t end) {
  std::size_t start = end - 1;
  // A sequence has at most three continuation bytes.
  while (start > 0 && end - start < 4 && is_utf8_continuation(bytes[start])) --start;
  const Utf8Step step = read_utf8(bytes, start);
  if (!step.valid || start + step.length != end) return {0, end - start, false};
  return step;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
    return;
  }
  // The lead byte carries the length (110, 1110 or 11110 then payload); each continuation byte 10 and six bits.
  const int continuations = code_point < 0x800 ? 1 : code_point < 0x10000 ? 2 : 3;
  const unsigned lead_marks[] = {0, 0xC0, 0xE0, 0xF0};
  out.push_back(static_cast<char>(lead_marks[continuations] | (code_point >> (6 * continuations))));
  for (int k = continuations - 1; k >= 0; --k)
    out.push_back(static_cast<char>(0x80 | ((code_point >> (6 * k)) & 0x3F)));
}

std::string replace_invalid_utf8(std::string_view bytes, Utf8Replacement policy) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Utf8Step step = read_utf8(bytes, pos);
    if (step.valid) {
      out.append(bytes.substr(pos, step.length));
    } else {
      // Every byte of a maximal subpart after its first is a continuation byte that no lead byte claims: read on
      // its own, each is ill-formed too, so one replacement per byte is `length` of them.
      const std::size_t replacements = policy == Utf8Replacement::each_byte ? step.length : 1;
      for (std::size_t k = 0; k < replacements; ++k) out.append(kReplacement);
    }
    pos += step.length;
  }
  return out;
}

}  // namespace crucible::eval

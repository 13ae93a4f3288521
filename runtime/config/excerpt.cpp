#include "config/excerpt.h"

#include <algorithm>

#include "crucible/eval/utf8_text.h"

namespace crucible::config {
namespace {

std::string printable(std::string_view text) {
  std::string out = eval::valid_utf8(text);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The first `max_bytes` or fewer bytes of text, ending before a character that would be cut.
std::string_view head(std::string_view text, std::size_t max_bytes) {
  std::size_t end = std::min(max_bytes, text.size());
  while (end > 0 && end < text.size() && continuation_byte(text[end])) --end;
  return text.substr(0, end);
}

// The last `max_bytes` or fewer bytes of text, starting on a character's first byte.
std::string_view tail(std::string_view text, std::size_t max_bytes) {
  std::size_t start = text.size() > max_bytes ? text.size() - max_bytes : 0;
  while (start < text.size() && continuation_byte(text[start])) ++start;
  return text.substr(start);
}

}  // namespace

std::string excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  const std::size_t head_bytes = max_bytes * 2 / 3;
  const std::string_view start = head(text, head_bytes);
  const std::string_view end = tail(text, max_bytes - head_bytes);
  const std::size_t cut = text.size() - start.size() - end.size();
  return printable(start) + "[... " + std::to_string(cut) + " bytes cut ...]" + printable(end);
}

}  // namespace crucible::config

#include "crucible/eval/utf8_text.h"

#include "crucible/eval/utf8_sequence.h"

namespace crucible::eval {

std::string valid_utf8(std::string_view text) { return replace_invalid_utf8(text, Utf8Replacement::each_byte); }

std::string valid_utf8_prefix(std::string_view text, std::size_t max_bytes) {
  // Made valid first (a replacement takes three bytes), then cut: the result is never longer than max_bytes.
  std::string valid = valid_utf8(text);
  if (valid.size() <= max_bytes) return valid;
  std::size_t end = max_bytes;
  // Back off over continuation bytes (at most three) so the cut falls before the character they belong to.
  for (int k = 0; k < 3 && end > 0 && is_utf8_continuation(valid[end]); ++k) --end;
  valid.resize(end);
  return valid;
}

}  // namespace crucible::eval

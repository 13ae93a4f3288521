#include "lm/tokenizer/utf8.h"

#include <stdexcept>

namespace crucible::lm {

void require_valid_utf8(std::string_view bytes, std::string_view what) {
  for (std::size_t pos = 0; pos < bytes.size();) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = read_utf8(bytes, pos);
    if (!step.valid)
      throw std::invalid_argument(std::string(what) + ": text is not valid UTF-8 (byte offset " +
                                  std::to_string(pos) + ")");
    pos += step.length;
  }
}

std::u32string decode_utf8(std::string_view bytes) {
  require_valid_utf8(bytes, "decode_utf8");
  std::u32string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Utf8Step step = read_utf8(bytes, pos);
    out.push_back(step.code_point);
    pos += step.length;
  }
  return out;
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t code_point : code_points) append_utf8(out, code_point);
  return out;
}

}  // namespace crucible::lm

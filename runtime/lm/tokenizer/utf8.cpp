#include "lm/tokenizer/utf8.h"

#include <stdexcept>

namespace crucible::lm {
namespace {

constexpr char32_t replacement_character = 0xFFFD;

bool is_continuation(unsigned char byte, unsigned char low = 0x80, unsigned char high = 0xBF) {
  return byte >= low && byte <= high;
}

}  // namespace

Utf8Step read_utf8(std::string_view bytes, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(bytes[pos]);
  if (lead < 0x80) return {lead, 1, true};
  std::size_t continuations = 0;
  // The second byte's range excludes overlong forms, surrogates and code points above U+10FFFF.
  unsigned char second_low = 0x80, second_high = 0xBF;
  char32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuations = 1;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuations = 2;
    code_point = lead & 0x0F;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuations = 3;
    code_point = lead & 0x07;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    return {0, 1, false};
  }
  for (std::size_t i = 1; i <= continuations; ++i) {
    if (pos + i >= bytes.size()) return {0, i, false};
    const auto byte = static_cast<unsigned char>(bytes[pos + i]);
    const bool ok = i == 1 ? is_continuation(byte, second_low, second_high) : is_continuation(byte);
    if (!ok) return {0, i, false};
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  return {code_point, continuations + 1, true};
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

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

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Utf8Step step = read_utf8(bytes, pos);
    if (step.valid)
      out.append(bytes.substr(pos, step.length));
    else
      append_utf8(out, replacement_character);
    pos += step.length;
  }
  return out;
}

}  // namespace crucible::lm

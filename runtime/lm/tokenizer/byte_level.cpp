#include "lm/tokenizer/byte_level.h"

#include <array>

#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

constexpr std::size_t byte_count = 256;
constexpr char32_t first_shifted_code_point = 0x100;

bool stands_for_itself(unsigned byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct ByteMapping {
  std::array<char32_t, byte_count> to_unicode{};
  // Indexed by code point; every mapped code point is below 0x100 + 68.
  std::array<int, first_shifted_code_point + byte_count> to_byte{};
};

const ByteMapping& mapping() {
  static const ByteMapping table = [] {
    ByteMapping out;
    out.to_byte.fill(-1);
    char32_t next_shifted = first_shifted_code_point;
    for (unsigned byte = 0; byte < byte_count; ++byte) {
      const char32_t cp = stands_for_itself(byte) ? byte : next_shifted++;
      out.to_unicode[byte] = cp;
      out.to_byte[cp] = static_cast<int>(byte);
    }
    return out;
  }();
  return table;
}

}  // namespace

char32_t byte_to_unicode(unsigned char byte) { return mapping().to_unicode[byte]; }

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes) append_utf8(out, byte_to_unicode(static_cast<unsigned char>(byte)));
  return out;
}

bool append_byte_level_bytes(std::string& out, std::string_view token) {
  const auto& to_byte = mapping().to_byte;
  const std::size_t old_size = out.size();
  for (std::size_t pos = 0; pos < token.size();) {
    const Utf8Step step = read_utf8(token, pos);
    if (!step.valid || step.code_point >= to_byte.size() || to_byte[step.code_point] < 0) {
      out.resize(old_size);
      return false;
    }
    out.push_back(static_cast<char>(to_byte[step.code_point]));
    pos += step.length;
  }
  return true;
}

}  // namespace crucible::lm

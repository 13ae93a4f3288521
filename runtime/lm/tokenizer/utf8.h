#pragma once
// UTF-8 reading and writing on std::string bytes.
#include <cstddef>
#include <string>
#include <string_view>

namespace crucible::lm {

// One step of reading UTF-8 at a position. When the bytes there are not a valid sequence, `length` is the
// length of its longest valid-looking prefix (at least 1): the unit that one U+FFFD replaces.
struct Utf8Step {
  char32_t code_point = 0;
  std::size_t length = 1;
  bool valid = false;
};

// Reads the sequence that starts at bytes[pos] (pos < bytes.size()).
Utf8Step read_utf8(std::string_view bytes, std::size_t pos);

void append_utf8(std::string& out, char32_t code_point);

// Throws std::invalid_argument naming `what` and the byte offset of the first invalid sequence.
void require_valid_utf8(std::string_view bytes, std::string_view what);

// Decodes valid UTF-8 (checked as by require_valid_utf8).
std::u32string decode_utf8(std::string_view bytes);
std::string encode_utf8(std::u32string_view code_points);

// Replaces each invalid sequence with U+FFFD the way Rust's String::from_utf8_lossy does
// (one replacement per maximal invalid prefix).
std::string utf8_lossy(std::string_view bytes);

}  // namespace crucible::lm

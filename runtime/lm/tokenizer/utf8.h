#pragma once
// UTF-8 as the tokenizer reads it: the shared reader (crucible/eval/utf8_sequence.h) under the names the tokenizer
// uses, plus the strict forms (text a tokenizer encodes must be valid; invalid text is an error, not repaired).
#include <cstddef>
#include <string>
#include <string_view>

#include "crucible/eval/utf8_sequence.h"

namespace crucible::lm {

using eval::append_utf8;
using eval::read_utf8;
using eval::read_utf8_before;
using eval::Utf8Step;

// Throws std::invalid_argument naming `what` and the byte offset of the first invalid sequence.
void require_valid_utf8(std::string_view bytes, std::string_view what);

// Decodes valid UTF-8 (checked as by require_valid_utf8).
std::u32string decode_utf8(std::string_view bytes);
std::string encode_utf8(std::u32string_view code_points);

// Replaces each invalid sequence with U+FFFD the way Rust's String::from_utf8_lossy does
// (one replacement per maximal invalid prefix).
inline std::string utf8_lossy(std::string_view bytes) {
  return eval::replace_invalid_utf8(bytes, eval::Utf8Replacement::maximal_subpart);
}

}  // namespace crucible::lm

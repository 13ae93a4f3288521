#pragma once
// The one reader of UTF-8 sequences (and writer of code points) in Crucible: every check, repair and decode of
// UTF-8 text goes through read_utf8, so the rules of well-formedness live in one place.
#include <cstddef>
#include <string>
#include <string_view>

namespace crucible::eval {

// One sequence read at a byte offset. When the bytes there do not start a well-formed sequence, `length` is its
// maximal subpart (at least 1): the longest prefix that could still begin a well-formed sequence.
struct Utf8Step {
  char32_t code_point = 0;  // meaningful only when valid
  std::size_t length = 1;
  bool valid = false;
};

// Reads the sequence that starts at bytes[pos] (pos < bytes.size()). Well-formed is as table 3-7 of the Unicode
// standard (RFC 3629) says: no overlong forms, no surrogates, nothing above U+10FFFF, nothing cut short.
Utf8Step read_utf8(std::string_view bytes, std::size_t pos);

// Reads the sequence that ends at bytes[end - 1] (0 < end <= bytes.size()), for walking text backwards; invalid
// when the bytes before `end` are not exactly one well-formed sequence.
Utf8Step read_utf8_before(std::string_view bytes, std::size_t end);

// A byte that continues a sequence (10xxxxxx) and never starts one: where text may not be cut.
inline bool is_utf8_continuation(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

// Appends the UTF-8 form of a code point (below U+110000).
void append_utf8(std::string& out, char32_t code_point);

// How much of an ill-formed sequence one U+FFFD stands for.
enum class Utf8Replacement {
  // One per byte: the count of replacements is the count of bad bytes (what compiler output and records get).
  each_byte,
  // One per maximal subpart, the practice the Unicode standard recommends (section 3.9) and that WHATWG's decoder
  // and Rust's String::from_utf8_lossy follow (what a tokenizer's decoded text gets).
  maximal_subpart,
};

// `bytes` with each ill-formed sequence replaced by U+FFFD as `policy` says; well-formed text is returned unchanged.
std::string replace_invalid_utf8(std::string_view bytes, Utf8Replacement policy);

}  // namespace crucible::eval

#pragma once
// Text from candidates, compilers, policies and nodes is untrusted bytes; records and messages are JSON, which
// must be valid UTF-8. Everything such text passes into is made valid here, once, where it enters.
#include <cstddef>
#include <string>
#include <string_view>

namespace crucible::eval {

// `text` with each byte that does not start or continue a well-formed UTF-8 sequence (stray continuation bytes,
// overlong forms, surrogates, code points above U+10FFFF, a sequence cut short) replaced by U+FFFD.
std::string valid_utf8(std::string_view text);

// `text` made valid, then cut to at most `max_bytes`, never inside a character.
std::string valid_utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace crucible::eval

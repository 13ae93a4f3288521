#pragma once
// Character properties used by the pre-tokenizer patterns and NFC (tables in unicode_tables.cpp).
#include <cstdint>

namespace crucible::lm {

bool is_letter(char32_t code_point);       // general category L
bool is_number(char32_t code_point);       // general category N
bool is_white_space(char32_t code_point);  // White_Space property (regex \s, Rust char::is_whitespace)
std::uint8_t combining_class(char32_t code_point);

}  // namespace crucible::lm

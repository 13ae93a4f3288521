#pragma once
// Character properties used by the pre-tokenizer patterns and NFC (tables in unicode_tables.cpp).
#include <cstdint>

namespace crucible::lm {

bool is_letter(char32_t code_point);       // general category L
bool is_number(char32_t code_point);       // general category N
bool is_lowercase_letter(char32_t code_point);        // general category Ll
bool is_upper_or_title_letter(char32_t code_point);   // general categories Lu and Lt
bool is_mark(char32_t code_point);                    // general category M
bool is_white_space(char32_t code_point);  // White_Space property (regex \s, Rust char::is_whitespace)
std::uint8_t combining_class(char32_t code_point);

}  // namespace crucible::lm

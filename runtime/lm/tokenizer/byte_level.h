#pragma once
// GPT-2's reversible mapping of the 256 byte values onto printable code points, used by byte-level BPE
// vocabularies: bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves, the other 68 bytes
// take U+0100 onwards in byte order (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#include <string>
#include <string_view>

namespace crucible::lm {

char32_t byte_to_unicode(unsigned char byte);

// The byte-level spelling (UTF-8) of raw bytes.
std::string to_byte_level(std::string_view bytes);

// Appends the raw bytes a byte-level token stands for. Returns false, appending nothing, when some
// character of the token is not in the mapping.
bool append_byte_level_bytes(std::string& out, std::string_view token);

}  // namespace crucible::lm

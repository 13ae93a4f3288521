#pragma once
// Text from a config echoed in an error message: one printable line of bounded length, however long or binary the
// text was (a 10 MB key must not become a 10 MB error line, nor a NUL or an escape sequence reach the terminal).
#include <cstddef>
#include <string>
#include <string_view>

namespace crucible::config {

// `text` made valid UTF-8 with control characters shown as '?'; when longer than `max_bytes`, its head and tail
// around a "[... N bytes cut ...]" mark (the tail often says what was expected).
std::string excerpt(std::string_view text, std::size_t max_bytes);

}  // namespace crucible::config

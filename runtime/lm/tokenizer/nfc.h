#pragma once
// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition).
#include <string>
#include <string_view>

namespace crucible::lm {

// Throws std::invalid_argument if `text` is not valid UTF-8.
std::string nfc(std::string_view text);

}  // namespace crucible::lm

#pragma once
// Text from candidates, compilers and run records goes to a terminal: no control characters (escape sequences)
// get through.
#include <string>

namespace crucible::cli {

inline std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) out += (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? '?' : static_cast<char>(c);
  return out;
}

}  // namespace crucible::cli

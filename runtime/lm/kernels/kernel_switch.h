#pragma once
// A kernel family's switch as the environment sets it at start: on unless its variable is "0" (benchmarks and tests
// compare both ways; each family also has a set_...() to flip it later).
#include <cstdlib>
#include <cstring>

namespace crucible::lm {

inline bool on_unless_zero(const char* variable) {
  const char* value = std::getenv(variable);
  return !(value && std::strcmp(value, "0") == 0);
}

}  // namespace crucible::lm

#pragma once
#include <cstdint>

namespace crucible::lm {

using TokenId = std::int32_t;

}  // namespace crucible::lm

#pragma once
// 64 distinct CUDA candidates for the relu task, as a best-of-N sweep would produce them (elementwise_variants.h).
#include <string>

#include "bench/elementwise_variants.h"

namespace crucible::bench {

inline std::string relu_variant(int i) { return elementwise_variant({"relu", "v > 0.f ? v : 0.f"}, i); }

}  // namespace crucible::bench

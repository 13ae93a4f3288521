#pragma once
// Element types of the candidate contract (values match crucible_dtype in crucible/kernel.h).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace crucible::eval {

enum class DType : int32_t { float32 = 0, float16, bfloat16, float64, int32, int64, boolean };

std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);
std::size_t dtype_size(DType t);
bool is_floating(DType t);

// A tensor's element type and concrete shape.
struct TensorShape {
  DType dtype;
  std::vector<int64_t> shape;
};

}  // namespace crucible::eval

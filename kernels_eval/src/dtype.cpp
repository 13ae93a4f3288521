#include "crucible/eval/dtype.h"

#include <array>

namespace crucible::eval {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 7> kTypes{{{DType::float32, "float32", 4},
                                           {DType::float16, "float16", 2},
                                           {DType::bfloat16, "bfloat16", 2},
                                           {DType::float64, "float64", 8},
                                           {DType::int32, "int32", 4},
                                           {DType::int64, "int64", 8},
                                           {DType::boolean, "bool", 1}}};
}  // namespace

std::string_view dtype_name(DType t) { return kTypes.at(static_cast<std::size_t>(t)).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& info : kTypes)
    if (info.name == name) return info.type;
  return std::nullopt;
}

std::size_t dtype_size(DType t) { return kTypes.at(static_cast<std::size_t>(t)).size; }

bool is_floating(DType t) {
  return t == DType::float32 || t == DType::float16 || t == DType::bfloat16 || t == DType::float64;
}

}  // namespace crucible::eval

#include "crucible/eval/task_spec.h"

#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace crucible::eval {

const Sizes& TaskSpec::sizes_for(const std::string& backend) const {
  auto it = sizes.find(backend);
  if (it == sizes.end())
    throw std::invalid_argument("task '" + name + "' declares no sizes for backend '" + backend + "'");
  return it->second;
}

const std::vector<ShapeCase>& TaskSpec::cases_for(const std::string& size_set) const {
  static const std::vector<ShapeCase> none;
  auto it = shape_cases.find(size_set);
  return it == shape_cases.end() ? none : it->second;
}

TaskSpec TaskSpec::at_case(const ShapeCase& c, const std::string& size_set) const {
  TaskSpec t = *this;
  t.name = name + "@" + c.name;
  t.sizes[size_set] = c.sizes;
  t.shape_cases.clear();
  for (auto& input : t.inputs)
    if (auto it = c.inits.find(input.name); it != c.inits.end()) input.init = it->second;
  return t;
}

Tolerance TaskSpec::tolerance_for(DType t) const {
  auto it = tolerance.find(t);
  return it == tolerance.end() ? Tolerance{} : it->second;
}

int64_t resolve_dim(const std::string& dim, const Sizes& sizes) {
  if (!dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]))) {
    std::size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(dim, &used);
    } catch (const std::out_of_range&) {
      throw std::invalid_argument("dimension literal '" + dim + "' is out of range");
    }
    if (used != dim.size()) throw std::invalid_argument("bad dimension literal '" + dim + "'");
    return value;
  }
  auto it = sizes.find(dim);
  if (it == sizes.end()) throw std::invalid_argument("unknown size symbol '" + dim + "'");
  return it->second;
}

std::vector<int64_t> resolve_shape(const TensorSpec& t, const Sizes& sizes) {
  std::vector<int64_t> shape;
  shape.reserve(t.shape.size());
  for (const auto& d : t.shape) {
    int64_t v = resolve_dim(d, sizes);
    if (v <= 0) throw std::invalid_argument("tensor '" + t.name + "': dimension '" + d + "' is not positive");
    shape.push_back(v);
    if (numel(shape) > (int64_t{1} << 40))
      throw std::invalid_argument("tensor '" + t.name + "' has more than 2^40 elements");
  }
  return shape;
}

double evaluate_product(const std::string& expr, const Sizes& sizes) {
  if (expr.empty()) return 0.0;
  double product = 1.0;
  std::size_t start = 0;
  while (start <= expr.size()) {
    std::size_t end = expr.find('*', start);
    if (end == std::string::npos) end = expr.size();
    std::string term = expr.substr(start, end - start);
    while (!term.empty() && std::isspace(static_cast<unsigned char>(term.back()))) term.pop_back();
    while (!term.empty() && std::isspace(static_cast<unsigned char>(term.front()))) term.erase(0, 1);
    if (term.empty()) throw std::invalid_argument("empty term in product '" + expr + "'");
    product *= static_cast<double>(resolve_dim(term, sizes));
    start = end + 1;
  }
  return product;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d > 0 && n > INT64_MAX / d) throw std::invalid_argument("tensor size overflows 64 bits");
    n *= d;
  }
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

}  // namespace crucible::eval

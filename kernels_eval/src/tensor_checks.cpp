#include "tensor_checks.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace crucible::eval {

torch::ScalarType to_torch(DType t) {
  switch (t) {
    case DType::float32: return torch::kFloat32;
    case DType::float16: return torch::kFloat16;
    case DType::bfloat16: return torch::kBFloat16;
    case DType::float64: return torch::kFloat64;
    case DType::int32: return torch::kInt32;
    case DType::int64: return torch::kInt64;
    case DType::boolean: return torch::kBool;
  }
  throw std::invalid_argument("unknown dtype");
}

std::vector<torch::Tensor> draw_inputs(const TaskSpec& task, const Sizes& sizes, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> inputs;
  for (const auto& spec : task.inputs) {
    auto shape = resolve_shape(spec, sizes);
    const auto& init = spec.init;
    torch::Tensor t;
    switch (init.kind) {
      case InitSpec::Kind::normal:
        t = torch::randn(shape, gen, torch::kFloat64) * init.std + init.mean;
        break;
      case InitSpec::Kind::uniform:
        t = torch::empty(shape, torch::kFloat64).uniform_(init.low, init.high, gen);
        break;
      case InitSpec::Kind::randint: {
        int64_t high = init.high_symbol.empty() ? static_cast<int64_t>(init.high) : resolve_dim(init.high_symbol, sizes);
        t = torch::randint(static_cast<int64_t>(init.low), high, shape, gen, torch::kInt64);
        break;
      }
    }
    if (init.scale_high != init.scale_low || init.scale_low != 1.0) {
      double u = torch::empty({1}, torch::kFloat64).uniform_(init.scale_low, init.scale_high, gen).item<double>();
      t = t * u;
    }
    inputs.push_back(t.to(to_torch(spec.dtype)).contiguous());
  }
  return inputs;
}

void write_tensor(std::byte* arena, const ArenaTensor& slot, const torch::Tensor& value) {
  auto v = value.contiguous();
  if (static_cast<std::size_t>(v.nbytes()) != slot.bytes) throw std::logic_error("write_tensor: size mismatch");
  std::memcpy(arena + slot.offset, v.data_ptr(), slot.bytes);
}

torch::Tensor view_tensor(std::byte* arena, const ArenaTensor& slot) {
  return torch::from_blob(arena + slot.offset, slot.shape, torch::TensorOptions().dtype(to_torch(slot.dtype)));
}

bool same_bytes(std::byte* arena, const ArenaTensor& slot, const torch::Tensor& expected) {
  return std::memcmp(arena + slot.offset, expected.data_ptr(), slot.bytes) == 0;
}

namespace {
template <typename T>
T pattern_value(int pattern);
template <>
uint32_t pattern_value(int p) { return p == 0 ? 0x7fc0dead : 0x7fc0beef; }  // quiet NaNs with payloads
template <>
uint16_t pattern_value(int p) { return p == 0 ? 0x7e0d : 0x7e0b; }
template <>
uint64_t pattern_value(int p) { return p == 0 ? 0x7ff80000deadbeefULL : 0x7ff80000beefdeadULL; }
template <>
uint8_t pattern_value(int p) { return p == 0 ? 0xa5 : 0x5a; }

template <typename T>
void fill(std::byte* data, std::size_t bytes, int pattern) {
  T v = pattern_value<T>(pattern);
  auto* p = reinterpret_cast<T*>(data);
  for (std::size_t i = 0; i < bytes / sizeof(T); ++i) p[i] = v;
}
template <typename T>
int64_t count(const std::byte* data, std::size_t bytes, int pattern) {
  T v = pattern_value<T>(pattern);
  auto* p = reinterpret_cast<const T*>(data);
  int64_t n = 0;
  for (std::size_t i = 0; i < bytes / sizeof(T); ++i) n += p[i] == v;
  return n;
}
}  // namespace

void poison(std::byte* arena, const ArenaTensor& slot, int pattern) {
  std::byte* d = arena + slot.offset;
  switch (dtype_size(slot.dtype)) {
    case 1: fill<uint8_t>(d, slot.bytes, pattern); break;
    case 2: fill<uint16_t>(d, slot.bytes, pattern); break;
    case 4: fill<uint32_t>(d, slot.bytes, pattern); break;
    default: fill<uint64_t>(d, slot.bytes, pattern); break;
  }
}

int64_t count_poisoned(std::byte* arena, const ArenaTensor& slot, int pattern) {
  const std::byte* d = arena + slot.offset;
  switch (dtype_size(slot.dtype)) {
    case 1: return count<uint8_t>(d, slot.bytes, pattern);
    case 2: return count<uint16_t>(d, slot.bytes, pattern);
    case 4: return count<uint32_t>(d, slot.bytes, pattern);
    default: return count<uint64_t>(d, slot.bytes, pattern);
  }
}

Comparison compare(const torch::Tensor& out, const torch::Tensor& ref, Tolerance tol) {
  Comparison c;
  c.elements = ref.numel();
  if (out.sizes() != ref.sizes()) {
    c.passed = false;
    c.mismatched = c.elements;
    return c;
  }
  if (!out.is_floating_point()) {
    c.mismatched = out.ne(ref).sum().item<int64_t>();
    c.passed = c.mismatched == 0;
    c.max_abs = c.passed ? 0.0 : (out.to(torch::kFloat64) - ref.to(torch::kFloat64)).abs().max().item<double>();
    return c;
  }
  auto o = out.to(torch::kFloat64);
  auto r = ref.to(torch::kFloat64);
  auto o_nan = o.isnan(), r_nan = r.isnan();
  c.nan_mismatched = (o_nan != r_nan).sum().item<int64_t>();
  auto both_finite = o.isfinite() & r.isfinite();
  auto diff = torch::where(both_finite, (o - r).abs(), torch::zeros_like(o));
  auto inf_mismatch = (~both_finite) & (~(o_nan & r_nan)) & (o != r);
  auto bad = (diff > (tol.atol + tol.rtol * r.abs())) | inf_mismatch | (o_nan != r_nan);
  c.mismatched = bad.sum().item<int64_t>();
  c.passed = c.mismatched == 0;
  if (c.elements > 0) {
    c.max_abs = diff.max().item<double>();
    c.max_rel = (diff / r.abs().clamp_min(1e-12)).max().item<double>();
  }
  return c;
}

void rotate_contents(std::byte* data, std::size_t elements, std::size_t element_size, std::size_t shift) {
  if (elements < 2) return;
  shift %= elements;
  std::rotate(data, data + shift * element_size, data + elements * element_size);
}

}  // namespace crucible::eval

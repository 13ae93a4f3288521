#include "tensor_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
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

namespace {
cuda::ElementKind element_kind(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat16: return cuda::ElementKind::float16;
    case torch::kBFloat16: return cuda::ElementKind::bfloat16;
    case torch::kFloat32: return cuda::ElementKind::float32;
    case torch::kFloat64: return cuda::ElementKind::float64;
    case torch::kInt32: return cuda::ElementKind::int32;
    case torch::kInt64: return cuda::ElementKind::int64;
    case torch::kInt16: return cuda::ElementKind::int16;
    case torch::kBool:
    case torch::kInt8:
    case torch::kUInt8: return cuda::ElementKind::int8;
    default: throw std::invalid_argument("no device comparison for this element type");
  }
}

torch::Tensor draw_flat(const InitSpec& init, int64_t n, const Sizes& sizes, at::Generator& gen, torch::Device device) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  switch (init.kind) {
    case InitSpec::Kind::normal:
      return torch::empty({n}, f32).normal_(init.mean, init.std, gen);
    case InitSpec::Kind::uniform:
      return torch::empty({n}, f32).uniform_(init.low, init.high, gen);
    case InitSpec::Kind::randint: {
      int64_t high = init.high_symbol.empty() ? static_cast<int64_t>(init.high) : resolve_dim(init.high_symbol, sizes);
      return torch::randint(static_cast<int64_t>(init.low), high, {n}, gen, f32.dtype(torch::kInt64));
    }
    case InitSpec::Kind::constant:
      return torch::full({n}, init.mean, f32.dtype(torch::kFloat64));
    case InitSpec::Kind::choice:
      return torch::randint(0, 2, {n}, gen, f32.dtype(torch::kFloat64)) * (init.high - init.low) + init.low;
    case InitSpec::Kind::cauchy:
      return torch::empty({n}, f32).cauchy_(init.mean, init.std, gen);
  }
  throw std::invalid_argument("unknown init kind");
}

// A window's first element at a random offset, aligned to 256 bytes as an allocation is: references (and
// candidates) may rely on aligned pointers (flash attention faults with "misaligned address" otherwise).
int64_t window_offset(std::mt19937_64& rng, int64_t n, const torch::Tensor& pool) {
  const int64_t step = std::max<int64_t>(1, 256 / static_cast<int64_t>(pool.element_size()));
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(n / step + 1)) * step;
}

torch::Tensor transformed(const InitSpec& init, torch::Tensor t) {
  switch (init.transform) {
    case InitSpec::Transform::none: return t;
    case InitSpec::Transform::triu: return torch::triu(t).contiguous();
    case InitSpec::Transform::tril: return torch::tril(t).contiguous();
    case InitSpec::Transform::symmetric: return ((t + t.transpose(-2, -1)) / 2).contiguous();
    case InitSpec::Transform::softmax: return torch::softmax(t, -1).contiguous();
  }
  throw std::invalid_argument("unknown input transform");
}

// A generator of the pool's device, seeded, without touching the process-wide default generators.
at::Generator seeded_generator(torch::Device device, uint64_t seed) {
  if (device.is_cpu()) return at::detail::createCPUGenerator(seed);
  at::Generator gen = at::globalContext().defaultGenerator(device).clone();
  gen.set_current_seed(seed);
  return gen;
}
}  // namespace

InputPool::InputPool(const TaskSpec& task, const Sizes& sizes, uint64_t seed, torch::Device device) {
  auto gen = seeded_generator(device, seed);
  for (const auto& spec : task.inputs) {
    inits_.push_back(spec.init);
    if (!spec.init.high_symbol.empty()) inits_.back().high = static_cast<double>(resolve_dim(spec.init.high_symbol, sizes));
    shapes_.push_back(resolve_shape(spec, sizes));
    int64_t n = numel(shapes_.back());
    pools_.push_back(draw_flat(spec.init, 2 * n, sizes, gen, device).to(to_torch(spec.dtype)).contiguous());
    if (device.is_cpu()) {
      std::mt19937_64 bits(seed + 0x51ed270b27u * (masks_.size() + 1));
      auto mask = torch::empty({2 * n}, torch::kUInt8);
      uint8_t* m = mask.data_ptr<uint8_t>();
      for (int64_t i = 0; i < 2 * n; ++i) m[i] = static_cast<uint8_t>(bits() & 1);
      masks_.push_back(mask);
    } else {
      masks_.push_back(torch::randint(0, 2, {2 * n}, gen, torch::TensorOptions().dtype(torch::kUInt8).device(device)));
    }
  }
}

std::vector<torch::Tensor> InputPool::draw(uint64_t seed) const {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  std::vector<torch::Tensor> inputs;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const auto& init = inits_[i];
    int64_t n = numel(shapes_[i]);
    const int64_t offset = window_offset(rng, n, pools_[i]);
    torch::Tensor t = pools_[i].narrow(0, offset, n).view(shapes_[i]);
    if (init.scale_low != 1.0 || init.scale_high != 1.0) {
      double u = std::uniform_real_distribution<double>(init.scale_low, init.scale_high)(rng);
      t = t * u;
    }
    inputs.push_back(transformed(init, t));
  }
  return inputs;
}

namespace {
// out = mask ? twice_center - in : in, as arithmetic: a select on a random mask compiles to a branch that
// mispredicts half the time (~9 ms per million elements); this form vectorises (~0.5 ms).
template <typename T>
void reflect_copy(const T* __restrict in, const uint8_t* __restrict mask, T* __restrict out, int64_t n,
                  T twice_center) {
  for (int64_t i = 0; i < n; ++i) {
    const T m = static_cast<T>(mask[i]);
    out[i] = in[i] + m * (twice_center - in[i] - in[i]);
  }
}
}  // namespace

torch::Tensor InputPool::fresh(std::size_t input, uint64_t seed) const {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 7);
  const auto& init = inits_[input];
  const int64_t n = numel(shapes_[input]);
  const int64_t offset = window_offset(rng, n, pools_[input]);
  const int64_t mask_offset = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
  const uint8_t* mask = nullptr;
  torch::Tensor window = pools_[input].narrow(0, offset, n);
  // Reflection about the distribution's centre keeps it: a constant reflects onto itself, a choice swaps its values.
  const double twice_center = init.kind == InitSpec::Kind::normal || init.kind == InitSpec::Kind::constant ||
                                      init.kind == InitSpec::Kind::cauchy
                                  ? 2 * init.mean
                                  : init.low + init.high;
  const double scale = init.scale_low != 1.0 || init.scale_high != 1.0
                           ? std::uniform_real_distribution<double>(init.scale_low, init.scale_high)(rng)
                           : 1.0;
  if (window.is_cuda()) {  // where(mask, twice_center - window, window) in one pass, without scratch memory
    torch::Tensor t = torch::empty({n}, window.options());
    const bool reflect_int = window.scalar_type() == torch::kInt64 && init.kind == InitSpec::Kind::randint;
    const uint8_t* flip = masks_[input].data_ptr<uint8_t>() + mask_offset;
    if (window.is_floating_point()) {
      // LibTorch's `c - x` first rounds c to x's type (a half type's centre, e.g. 0.2, is not exact), then subtracts
      // in float: a constant input must still reflect onto itself.
      const double center = torch::scalar_tensor(twice_center, torch::kFloat64).to(t.scalar_type()).item<double>();
      cuda::reflect_copy(t.data_ptr(), window.data_ptr(), flip, n, element_kind(t.scalar_type()), center);
    } else if (reflect_int) {
      const int64_t top = static_cast<int64_t>(init.low + init.high) - 1;
      cuda::reflect_copy(t.data_ptr(), window.data_ptr(), flip, n, cuda::ElementKind::int64, static_cast<double>(top));
    } else
      t.copy_(window);
    t = t.view(shapes_[input]);
    if (scale != 1.0) t.mul_(scale);
    return transformed(init, t);
  }
  mask = masks_[input].data_ptr<uint8_t>() + mask_offset;
  torch::Tensor t = torch::empty(shapes_[input], window.options());
  switch (t.scalar_type()) {
    case torch::kFloat32:
      reflect_copy(window.data_ptr<float>(), mask, t.data_ptr<float>(), n, static_cast<float>(twice_center));
      break;
    case torch::kFloat64:
      reflect_copy(window.data_ptr<double>(), mask, t.data_ptr<double>(), n, twice_center);
      break;
    case torch::kInt64:  // randint(low, high) is symmetric around (low + high - 1) / 2
      if (init.kind == InitSpec::Kind::randint)
        reflect_copy(window.data_ptr<int64_t>(), mask, t.data_ptr<int64_t>(), n,
                     static_cast<int64_t>(init.low + init.high) - 1);
      else
        t.copy_(window.view(shapes_[input]));
      break;
    default:
      t.copy_(window.view(shapes_[input]));  // other dtypes keep the plain window
      break;
  }
  if (scale != 1.0) t = t * scale;
  return transformed(init, t);
}

bool InputPool::shares_memory(std::size_t input, const torch::Tensor& t) const {
  return t.defined() && t.storage().is_alias_of(pools_[input].storage());
}

std::optional<double> InputPool::reflection_center2(std::size_t input) const {
  const auto& init = inits_[input];
  const auto type = pools_[input].scalar_type();
  if (init.transform != InitSpec::Transform::none || init.scale_low != 1.0 || init.scale_high != 1.0)
    return std::nullopt;
  const bool floating = pools_[input].is_floating_point();
  switch (init.kind) {
    case InitSpec::Kind::normal:
    case InitSpec::Kind::cauchy: return floating ? std::optional<double>(2 * init.mean) : std::nullopt;
    case InitSpec::Kind::uniform:
    case InitSpec::Kind::choice: return floating ? std::optional<double>(init.low + init.high) : std::nullopt;
    case InitSpec::Kind::randint:
      return type == torch::kInt64 ? std::optional<double>(init.low + init.high - 1) : std::nullopt;
    case InitSpec::Kind::constant: return std::nullopt;  // reflects onto itself: nothing would change
  }
  return std::nullopt;
}

namespace {
torch::Tensor raw_view(ArenaRef arena, const ArenaTensor& slot, torch::ScalarType type, int64_t elements) {
  return torch::from_blob(arena.base + slot.offset, {elements}, torch::TensorOptions().dtype(type).device(arena.device()));
}
torch::Tensor byte_view(ArenaRef arena, const ArenaTensor& slot) {
  return raw_view(arena, slot, torch::kUInt8, static_cast<int64_t>(slot.bytes));
}
}  // namespace

void write_tensor(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value) {
  if (static_cast<std::size_t>(value.nbytes()) != slot.bytes) throw std::logic_error("write_tensor: size mismatch");
  if (arena.on_gpu()) {
    view_tensor(arena, slot).copy_(value);
    return;
  }
  auto v = value.contiguous();
  std::memcpy(arena.base + slot.offset, v.data_ptr(), slot.bytes);
}

torch::Tensor view_tensor(ArenaRef arena, const ArenaTensor& slot) {
  return torch::from_blob(arena.base + slot.offset, slot.shape,
                          torch::TensorOptions().dtype(to_torch(slot.dtype)).device(arena.device()));
}

bool same_bytes(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& expected) {
  if (arena.on_gpu()) {
    auto e = expected.contiguous();
    return static_cast<std::size_t>(e.nbytes()) == slot.bytes && e.is_cuda() &&
           cuda::same_device_bytes(arena.base + slot.offset, e.data_ptr(), slot.bytes);
  }
  return std::memcmp(arena.base + slot.offset, expected.data_ptr(), slot.bytes) == 0;
}

WrittenInput write_input(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value, uint64_t key) {
  if (!arena.on_gpu()) {
    write_tensor(arena, slot, value);
    return {};
  }
  if (static_cast<std::size_t>(value.nbytes()) != slot.bytes) throw std::logic_error("write_input: size mismatch");
  auto v = value.contiguous();
  if (!v.is_cuda()) v = v.to(arena.device());
  return cuda::copy_with_fingerprint(arena.base + slot.offset, v.data_ptr(), slot.bytes, key);
}

bool input_intact(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value, const WrittenInput& written,
                  uint64_t key) {
  if (!arena.on_gpu() || !value.is_cuda()) return same_bytes(arena, slot, value);
  return input_intact(arena, slot, written, key);
}

bool input_intact(ArenaRef arena, const ArenaTensor& slot, const WrittenInput& written, uint64_t key) {
  if (!arena.on_gpu()) throw std::logic_error("input_intact: a fingerprint is taken of device tensors only");
  return cuda::fingerprint(arena.base + slot.offset, slot.bytes, key) == written;
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

namespace {
// The patterns as the signed integer of their width (all are positive), for filling a device tensor.
std::pair<torch::ScalarType, int64_t> device_pattern(DType dtype, int pattern) {
  switch (dtype_size(dtype)) {
    case 1: return {torch::kUInt8, pattern_value<uint8_t>(pattern)};
    case 2: return {torch::kInt16, pattern_value<uint16_t>(pattern)};
    case 4: return {torch::kInt32, pattern_value<uint32_t>(pattern)};
    default: return {torch::kInt64, static_cast<int64_t>(pattern_value<uint64_t>(pattern))};
  }
}
torch::Tensor pattern_view(ArenaRef arena, const ArenaTensor& slot, int pattern, int64_t& value) {
  auto [type, v] = device_pattern(slot.dtype, pattern);
  value = v;
  return raw_view(arena, slot, type, static_cast<int64_t>(slot.bytes / dtype_size(slot.dtype)));
}
}  // namespace

void poison(ArenaRef arena, const ArenaTensor& slot, int pattern) {
  if (arena.on_gpu()) {
    int64_t value = 0;
    pattern_view(arena, slot, pattern, value).fill_(value);
    return;
  }
  std::byte* d = arena.base + slot.offset;
  switch (dtype_size(slot.dtype)) {
    case 1: fill<uint8_t>(d, slot.bytes, pattern); break;
    case 2: fill<uint16_t>(d, slot.bytes, pattern); break;
    case 4: fill<uint32_t>(d, slot.bytes, pattern); break;
    default: fill<uint64_t>(d, slot.bytes, pattern); break;
  }
}

int64_t count_poisoned(ArenaRef arena, const ArenaTensor& slot, int pattern) {
  if (arena.on_gpu()) {
    auto [type, value] = device_pattern(slot.dtype, pattern);
    (void)type;
    return cuda::count_pattern(arena.base + slot.offset, static_cast<int64_t>(slot.bytes / dtype_size(slot.dtype)),
                               static_cast<int>(dtype_size(slot.dtype)), static_cast<uint64_t>(value));
  }
  const std::byte* d = arena.base + slot.offset;
  switch (dtype_size(slot.dtype)) {
    case 1: return count<uint8_t>(d, slot.bytes, pattern);
    case 2: return count<uint16_t>(d, slot.bytes, pattern);
    case 4: return count<uint32_t>(d, slot.bytes, pattern);
    default: return count<uint64_t>(d, slot.bytes, pattern);
  }
}

void poison_sampled(ArenaRef arena, const ArenaTensor& slot, int pattern, uint64_t seed, int64_t block) {
  if (!arena.on_gpu()) throw std::logic_error("sampled poison is a device pass");
  auto [type, value] = device_pattern(slot.dtype, pattern);
  (void)type;
  cuda::poison_sampled(arena.base + slot.offset, static_cast<int64_t>(slot.bytes / dtype_size(slot.dtype)),
                       static_cast<int>(dtype_size(slot.dtype)), static_cast<uint64_t>(value), seed, block);
}

int64_t count_poisoned_sampled(ArenaRef arena, const ArenaTensor& slot, int pattern, uint64_t seed, int64_t block) {
  if (!arena.on_gpu()) throw std::logic_error("sampled poison is a device pass");
  auto [type, value] = device_pattern(slot.dtype, pattern);
  (void)type;
  return cuda::count_pattern_sampled(arena.base + slot.offset,
                                     static_cast<int64_t>(slot.bytes / dtype_size(slot.dtype)),
                                     static_cast<int>(dtype_size(slot.dtype)), static_cast<uint64_t>(value), seed,
                                     block);
}

void reflect_sampled(ArenaRef arena, const ArenaTensor& slot, double twice_center, uint64_t seed, int64_t block,
                     uint64_t key, WrittenInput& written) {
  if (!arena.on_gpu()) throw std::logic_error("reflect_sampled: sampled checks are for device tensors");
  written += cuda::reflect_sampled(arena.base + slot.offset, static_cast<int64_t>(slot.bytes / dtype_size(slot.dtype)),
                                   element_kind(to_torch(slot.dtype)), twice_center, seed, block, key);
}

namespace {
constexpr uint8_t kCanary = 0xcb;
torch::Tensor guard_view(ArenaRef arena, const ArenaTensor& slot) {
  return torch::from_blob(arena.base + slot.offset + slot.bytes, {static_cast<int64_t>(slot.guard_bytes)},
                          torch::TensorOptions().dtype(torch::kUInt8).device(arena.device()));
}
}  // namespace

void fill_guard(ArenaRef arena, const ArenaTensor& slot) {
  if (slot.guard_bytes == 0) return;
  if (arena.on_gpu())
    guard_view(arena, slot).fill_(kCanary);
  else
    std::memset(arena.base + slot.offset + slot.bytes, kCanary, slot.guard_bytes);
}

bool guard_intact(ArenaRef arena, const ArenaTensor& slot) {
  if (slot.guard_bytes == 0) return true;
  if (arena.on_gpu()) return guard_view(arena, slot).eq(kCanary).all().item<bool>();
  const auto* g = reinterpret_cast<const uint8_t*>(arena.base + slot.offset + slot.bytes);
  for (std::size_t i = 0; i < slot.guard_bytes; ++i)
    if (g[i] != kCanary) return false;
  return true;
}

namespace {
template <typename T>
double as_double(T v) { return static_cast<double>(v); }

// A branch-free pass that the compiler vectorises, in the output's own precision for float32 (cloned
// for AVX2 where the CPU has it); only when it finds bad elements does a second pass sort out NaN and
// infinity cases in double precision.
template <typename T, typename Acc>
__attribute__((target_clones("avx2", "default"))) int64_t fast_pass(const T* o, const T* r, int64_t n, Acc atol,
                                                                   Acc rtol, double& max_abs_out,
                                                                   double& max_rel_out) {
  Acc max_abs = 0, max_rel = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    Acc a = static_cast<Acc>(o[i]), b = static_cast<Acc>(r[i]);
    Acc diff = std::fabs(a - b), scale = std::fabs(b);
    bad += !(diff <= atol + rtol * scale);  // NaN compares false: counted, sorted out below
    Acc rel = diff / (scale > Acc(1e-12) ? scale : Acc(1e-12));
    max_abs = diff > max_abs ? diff : max_abs;
    max_rel = rel > max_rel ? rel : max_rel;
  }
  max_abs_out = max_abs;
  max_rel_out = max_rel;
  return bad;
}

template <typename T>
Comparison compare_floats(const T* o, const T* r, int64_t n, Tolerance tol) {
  Comparison c;
  c.elements = n;
  double max_abs = 0.0, max_rel = 0.0;
  int64_t bad;
  if constexpr (std::is_same_v<T, float>)
    bad = fast_pass<float, float>(o, r, n, static_cast<float>(tol.atol), static_cast<float>(tol.rtol), max_abs, max_rel);
  else
    bad = fast_pass<T, double>(o, r, n, tol.atol, tol.rtol, max_abs, max_rel);
  if (bad > 0) {
    bad = 0;
    max_abs = max_rel = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double a = as_double(o[i]), b = as_double(r[i]);
      bool a_nan = std::isnan(a), b_nan = std::isnan(b);
      bool is_bad;
      if (a_nan || b_nan) {
        is_bad = a_nan != b_nan;
        c.nan_mismatched += is_bad;
      } else if (std::isinf(a) || std::isinf(b)) {
        is_bad = a != b;
      } else {
        double diff = std::fabs(a - b);
        is_bad = diff > tol.atol + tol.rtol * std::fabs(b);
        max_abs = std::max(max_abs, diff);
        max_rel = std::max(max_rel, diff / std::max(std::fabs(b), 1e-12));
      }
      bad += is_bad;
    }
  }
  c.max_abs = max_abs;
  c.max_rel = max_rel;
  c.mismatched = bad;
  c.passed = bad == 0;
  return c;
}
}  // namespace

namespace {
// On a GPU: the same rules as compare_floats, in one pass (see device_checks.h).
Comparison compare_on_device(const torch::Tensor& out, const torch::Tensor& ref, Tolerance tol) {
  auto o = out.contiguous(), r = ref.contiguous();
  Comparison c;
  c.elements = r.numel();
  auto d = cuda::compare_elements(o.data_ptr(), r.data_ptr(), c.elements, element_kind(r.scalar_type()), tol.atol,
                                  tol.rtol);
  c.mismatched = d.mismatched;
  c.nan_mismatched = d.nan_mismatched;
  c.max_abs = d.max_abs;
  c.max_rel = d.max_rel;
  c.passed = c.mismatched == 0;
  return c;
}
}  // namespace

Comparison compare(const torch::Tensor& out, const torch::Tensor& ref, Tolerance tol) {
  if (out.sizes() != ref.sizes() || out.scalar_type() != ref.scalar_type()) {
    Comparison c;
    c.elements = ref.numel();
    c.mismatched = c.elements;
    c.passed = false;
    return c;
  }
  if (out.is_cuda() || ref.is_cuda()) return compare_on_device(out, ref.to(out.device()), tol);
  auto o = out.contiguous(), r = ref.contiguous();
  int64_t n = r.numel();
  switch (r.scalar_type()) {
    case torch::kFloat32: return compare_floats(o.data_ptr<float>(), r.data_ptr<float>(), n, tol);
    case torch::kFloat64: return compare_floats(o.data_ptr<double>(), r.data_ptr<double>(), n, tol);
    case torch::kFloat16: return compare_floats(o.data_ptr<at::Half>(), r.data_ptr<at::Half>(), n, tol);
    case torch::kBFloat16: return compare_floats(o.data_ptr<at::BFloat16>(), r.data_ptr<at::BFloat16>(), n, tol);
    default: {
      Comparison c;
      c.elements = n;
      c.mismatched = o.ne(r).sum().item<int64_t>();
      c.passed = c.mismatched == 0;
      if (!c.passed) c.max_abs = (o.to(torch::kFloat64) - r.to(torch::kFloat64)).abs().max().item<double>();
      return c;
    }
  }
}

double max_abs(const torch::Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return 0.0;
  if (t.is_cuda())  // no full-size temporary: the largest magnitude is at the maximum or the minimum
    return std::max(std::fabs(t.max().to(torch::kFloat64).item<double>()),
                    std::fabs(t.min().to(torch::kFloat64).item<double>()));
  auto c = t.contiguous();
  double m = 0.0;
  if (c.scalar_type() == torch::kFloat32) {
    const float* p = c.data_ptr<float>();
    float fm = 0.0f;
    const int64_t n = c.numel();  // hoisted: the accessor is not a constant the loop may assume
    for (int64_t i = 0; i < n; ++i) {
      float a = std::fabs(p[i]);
      fm = a > fm ? a : fm;
    }
    return fm;
  }
  return c.abs().max().to(torch::kFloat64).item<double>();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string tensor_text(const torch::Tensor& t) {
  std::string dtype = c10::toString(t.scalar_type());  // torch's name for a type the contract does not have
  for (auto d : {DType::float32, DType::float16, DType::bfloat16, DType::float64, DType::int32, DType::int64,
                 DType::boolean})
    if (to_torch(d) == t.scalar_type()) dtype = dtype_name(d);
  return shape_text(t.sizes().vec()) + " " + dtype;
}

}  // namespace crucible::eval

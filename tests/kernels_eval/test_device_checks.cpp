// The evaluator's one-pass device checks against the rules they implement, on real device memory: comparisons
// (tolerance edges, NaN, infinities, integers), byte equality on both of its paths, poison counts, and the sampled
// passes of timed calls (one element per block, the same element for poison and its count, copies kept equal).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda/device_checks.h"

using namespace crucible::eval::cuda;

namespace {

// A device copy of a host vector, freed at the end of the scope.
template <typename T>
struct DeviceVector {
  explicit DeviceVector(const std::vector<T>& host) : n(host.size()) {
    REQUIRE(cudaMalloc(&data, std::max<std::size_t>(1, n) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data); }
  std::vector<T> read() const {
    std::vector<T> host(n);
    REQUIRE(cudaMemcpy(host.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }
  T* data = nullptr;
  std::size_t n;
};

// The rule, written out on the host.
template <typename T>
ElementComparison expected(const std::vector<T>& out, const std::vector<T>& ref, double atol, double rtol) {
  ElementComparison c;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double a = out[i], b = ref[i];
    if (std::isnan(a) || std::isnan(b)) {
      c.mismatched += std::isnan(a) != std::isnan(b);
      c.nan_mismatched += std::isnan(a) != std::isnan(b);
    } else if (std::isinf(a) || std::isinf(b)) {
      c.mismatched += a != b;
    } else {
      const double diff = std::fabs(a - b);
      c.mismatched += !(diff <= atol + rtol * std::fabs(b));
      c.max_abs = std::max(c.max_abs, diff);
      c.max_rel = std::max(c.max_rel, diff / std::max(std::fabs(b), 1e-12));
    }
  }
  return c;
}

}  // namespace

TEST_CASE("device checks: a comparison follows the CPU's rule at its edges") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Row {
    const char* what;
    float out, ref;
    int64_t mismatched, nan_mismatched;
  };
  const Row rows[] = {
      {"equal", 1.5f, 1.5f, 0, 0},
      {"inside atol + rtol*|ref|", 1.0f + 1.5e-4f, 1.0f, 0, 0},
      {"outside it", 1.0f + 3e-4f, 1.0f, 1, 0},
      {"NaN against NaN", nan, nan, 0, 0},
      {"NaN against a number", nan, 2.0f, 1, 1},
      {"a number against NaN", 2.0f, nan, 1, 1},
      {"equal infinities", inf, inf, 0, 0},
      {"opposite infinities", inf, -inf, 1, 0},
      {"an infinity against a number", inf, 3.0f, 1, 0},
  };
  for (const auto& row : rows) {
    DeviceVector<float> out(std::vector<float>{row.out}), ref(std::vector<float>{row.ref});
    auto c = compare_elements(out.data, ref.data, 1, ElementKind::float32, 1e-4, 1e-4);
    INFO(row.what);
    CHECK(c.mismatched == row.mismatched);
    CHECK(c.nan_mismatched == row.nan_mismatched);
  }
}

TEST_CASE("device checks: comparisons of many elements agree with the host in float32, float64 and integers") {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  const std::size_t n = (1u << 22) + 37;  // several blocks per thread, and a tail
  std::vector<float> ref32(n), out32(n);
  std::vector<double> ref64(n), out64(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref64[i] = normal(rng);
    // Most within tolerance, some just outside, a few NaN.
    const double noise = i % 1000 == 0 ? 1e-2 : i % 7 == 0 ? 1e-6 : 0.0;
    out64[i] = i % 100003 == 0 ? std::nan("") : ref64[i] + noise;
    ref32[i] = static_cast<float>(ref64[i]);
    out32[i] = static_cast<float>(out64[i]);
  }
  DeviceVector<float> o32(out32), r32(ref32);
  DeviceVector<double> o64(out64), r64(ref64);
  auto c32 = compare_elements(o32.data, r32.data, n, ElementKind::float32, 1e-4, 1e-4);
  auto c64 = compare_elements(o64.data, r64.data, n, ElementKind::float64, 1e-4, 1e-4);
  auto e32 = expected(out32, ref32, 1e-4, 1e-4), e64 = expected(out64, ref64, 1e-4, 1e-4);
  CHECK(c32.mismatched == e32.mismatched);
  CHECK(c32.nan_mismatched == e32.nan_mismatched);
  CHECK(c32.max_abs == doctest::Approx(e32.max_abs).epsilon(1e-5));
  CHECK(c64.mismatched == e64.mismatched);
  CHECK(c64.nan_mismatched == e64.nan_mismatched);
  CHECK(c64.max_abs == doctest::Approx(e64.max_abs).epsilon(1e-9));
  CHECK(c64.max_rel == doctest::Approx(e64.max_rel).epsilon(1e-9));
  CHECK(e64.mismatched > 4000);  // the table has failures to find

  std::vector<int64_t> ints(n), other(n);
  for (std::size_t i = 0; i < n; ++i) ints[i] = other[i] = static_cast<int64_t>(i % 977);
  other[n - 1] += 5;
  other[12345] -= 2;
  DeviceVector<int64_t> a(ints), b(other);
  auto ci = compare_elements(b.data, a.data, n, ElementKind::int64, 0.0, 0.0);
  CHECK(ci.mismatched == 2);
  CHECK(ci.max_abs == 5.0);
}

TEST_CASE("device checks: byte equality sees one changed byte on the word path and the byte path") {
  for (std::size_t bytes : {std::size_t{1} << 20, (std::size_t{1} << 20) + 3}) {
    std::vector<uint8_t> host(bytes);
    for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 31);
    DeviceVector<uint8_t> a(host), b(host);
    CHECK(same_device_bytes(a.data, b.data, bytes));
    host[bytes - 1] ^= 1;
    DeviceVector<uint8_t> c(host);
    CHECK_FALSE(same_device_bytes(a.data, c.data, bytes));
  }
}

TEST_CASE("device checks: sampled poison touches one element per block, and its count finds exactly those") {
  const int64_t n = 1000003, block = 1024, blocks = (n + block - 1) / block;
  const uint32_t pattern = 0x7fc0dead;
  DeviceVector<uint32_t> data(std::vector<uint32_t>(n, 1));
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 99, block) == 0);
  poison_sampled(data.data, n, 4, pattern, 99, block);
  CHECK(count_pattern(data.data, n, 4, pattern) == blocks);
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 99, block) == blocks);
  // Another seed picks other elements: almost none of the first ones.
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 100, block) < blocks / 100);
  auto host = data.read();
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t in_block = 0;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) in_block += host[i] == pattern;
    REQUIRE(in_block == 1);
  }
}

TEST_CASE("device checks: a sampled reflection changes both copies alike, one element per block") {
  const int64_t n = (1 << 20) + 5, block = 1024, blocks = (n + block - 1) / block;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> host(n);
  for (auto& x : host) x = uniform(rng);
  DeviceVector<float> arena(host), copy(host);
  reflect_sampled(arena.data, copy.data, n, ElementKind::float32, 1.0, 11, block);  // about 0.5: x -> 1 - x
  auto a = arena.read(), c = copy.read();
  CHECK(a == c);
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != host[i]) {
      ++changed;
      CHECK(a[i] == 1.0f - host[i]);
    }
  CHECK(changed > blocks - 5);  // x == 0.5 reflects onto itself
  CHECK(changed <= blocks);

  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;  // randint(0, 10): x -> 9 - x
  DeviceVector<int64_t> la(labels), lc(labels);
  reflect_sampled(la.data, lc.data, n, ElementKind::int64, 9.0, 11, block);
  auto ra = la.read();
  CHECK(ra == lc.read());
  for (int64_t i = 0; i < n; ++i) REQUIRE((ra[i] == labels[i] || ra[i] == 9 - labels[i]));
}

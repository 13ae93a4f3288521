// The evaluator's one-pass device checks against the rules they implement, on real device memory: comparisons
// (tolerance edges, NaN, infinities, integers, 16 bytes at a time and element by element), byte equality on both of
// its paths, keyed fingerprints, poison counts, and the sampled passes of timed calls (one run of a cache line per
// span, the same runs for poison and its count, a reflection's change to the fingerprint).
#include <doctest/doctest.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

TEST_CASE("device checks: a comparison gives the same answer 16 bytes at a time and element by element") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const std::size_t n = (1u << 20) + 7;
  std::vector<float> ref(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref[i] = normal(rng);
    out[i] = i % 501 == 0 ? ref[i] + 1.0f : i % 90001 == 0 ? std::nanf("") : ref[i];
  }
  DeviceVector<float> o(out), r(ref);
  const auto whole = compare_elements(o.data, r.data, n, ElementKind::float32, 1e-4, 1e-4);
  CHECK(whole.mismatched == expected(out, ref, 1e-4, 1e-4).mismatched);
  // One element in: neither buffer is 16-byte aligned, so every element is read alone.
  const std::vector<float> out1(out.begin() + 1, out.end()), ref1(ref.begin() + 1, ref.end());
  const auto shifted = compare_elements(o.data + 1, r.data + 1, n - 1, ElementKind::float32, 1e-4, 1e-4);
  const auto e1 = expected(out1, ref1, 1e-4, 1e-4);
  CHECK(shifted.mismatched == e1.mismatched);
  CHECK(shifted.nan_mismatched == e1.nan_mismatched);
  CHECK(shifted.max_abs == doctest::Approx(e1.max_abs).epsilon(1e-5));
  CHECK(e1.mismatched > 2000);
}

TEST_CASE("device checks: the copy takes the input's fingerprint, and a changed byte, swapped chunks or another key "
          "give another") {
  for (std::size_t bytes : {std::size_t{1} << 20, (std::size_t{1} << 20) + 3}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {  // 16-byte chunks, and byte by byte
      CAPTURE(bytes);
      CAPTURE(offset);
      std::vector<uint8_t> host(bytes + offset);
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
      DeviceVector<uint8_t> src(host), dst(std::vector<uint8_t>(bytes + offset, 0));
      const uint64_t key = 0x1234567887654321ull;
      const Fingerprint taken = copy_with_fingerprint(dst.data + offset, src.data + offset, bytes, key);
      const auto copied = dst.read();
      CHECK(std::equal(copied.begin() + offset, copied.end(), host.begin() + offset));
      CHECK(std::all_of(copied.begin(), copied.begin() + offset, [](uint8_t b) { return b == 0; }));
      CHECK(fingerprint(dst.data + offset, bytes, key) == taken);
      CHECK_FALSE(fingerprint(dst.data + offset, bytes, key + 1) == taken);
      for (std::size_t at : {std::size_t{0}, bytes / 2, bytes - 1}) {
        std::vector<uint8_t> changed = host;
        changed[offset + at] ^= 0x10;
        DeviceVector<uint8_t> c(changed);
        CHECK_FALSE(fingerprint(c.data + offset, bytes, key) == taken);
      }
      std::vector<uint8_t> swapped = host;  // two 16-byte chunks trade places: the same words, other places
      std::swap_ranges(swapped.begin() + offset, swapped.begin() + offset + 16, swapped.begin() + offset + 4096);
      DeviceVector<uint8_t> w(swapped);
      CHECK_FALSE(fingerprint(w.data + offset, bytes, key) == taken);
    }
  }
}

TEST_CASE("device checks: sampled poison touches one run of a 128-byte line per span, and its count finds exactly "
          "those") {
  const int64_t n = 1000003, block = 1024, run = 32, span = block * run, spans = (n + span - 1) / span;
  const uint32_t pattern = 0x7fc0dead;
  DeviceVector<uint32_t> data(std::vector<uint32_t>(n, 1));
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 99, block) == 0);
  poison_sampled(data.data, n, 4, pattern, 99, block);
  const int64_t poisoned = count_pattern(data.data, n, 4, pattern);
  CHECK(poisoned > (spans - 1) * run);  // one element in `block`; the tensor's last run may be short
  CHECK(poisoned <= spans * run);
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 99, block) == poisoned);
  // Another seed picks other runs: almost none of the first ones.
  CHECK(count_pattern_sampled(data.data, n, 4, pattern, 100, block) < poisoned / 10);
  auto host = data.read();
  for (int64_t b = 0; b < spans; ++b) {
    std::vector<int64_t> at;
    for (int64_t i = b * span; i < std::min(n, (b + 1) * span); ++i)
      if (host[i] == pattern) at.push_back(i);
    REQUIRE(!at.empty());
    CHECK((at.front() - b * span) % run == 0);  // a whole line, consecutive
    CHECK(at.back() - at.front() == static_cast<int64_t>(at.size()) - 1);
    CHECK((static_cast<int64_t>(at.size()) == run || at.back() == n - 1));
  }
}

TEST_CASE("device checks: a sampled reflection changes one run per span in place, and its fingerprint follows") {
  const int64_t n = (1 << 20) + 5, block = 1024, run = 32, spans = (n + block * run - 1) / (block * run);
  const uint64_t key = 0xfeedfacecafebeefull;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> host(n);
  for (auto& x : host) x = uniform(rng);
  DeviceVector<float> arena(host);
  Fingerprint print = fingerprint(arena.data, n * sizeof(float), key);
  print += reflect_sampled(arena.data, n, ElementKind::float32, 1.0, 11, block, key);  // x -> 1 - x
  CHECK(fingerprint(arena.data, n * sizeof(float), key) == print);
  auto a = arena.read();
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != host[i]) {
      ++changed;
      CHECK(a[i] == 1.0f - host[i]);
    }
  CHECK(changed > (spans - 1) * run - 5);  // x == 0.5 reflects onto itself; the last span holds 5 elements
  CHECK(changed <= spans * run);
  // A change the reflection did not make still shows, also inside a reflected run.
  std::vector<float> tampered = a;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != host[i]) {
      tampered[i] += 0.25f;
      break;
    }
  DeviceVector<float> t(tampered);
  CHECK_FALSE(fingerprint(t.data, n * sizeof(float), key) == print);

  // int64 labels, from one element in: the buffer is not 16-byte aligned, so chunks are read byte by byte.
  std::vector<int64_t> labels(n + 1);
  for (int64_t i = 0; i <= n; ++i) labels[i] = i % 10;  // randint(0, 10): x -> 9 - x
  DeviceVector<int64_t> la(labels);
  Fingerprint lprint = fingerprint(la.data + 1, n * sizeof(int64_t), key);
  lprint += reflect_sampled(la.data + 1, n, ElementKind::int64, 9.0, 11, block, key);
  CHECK(fingerprint(la.data + 1, n * sizeof(int64_t), key) == lprint);
  auto ra = la.read();
  CHECK(ra[0] == 0);
  for (int64_t i = 1; i <= n; ++i) REQUIRE((ra[i] == labels[i] || ra[i] == 9 - labels[i]));
}

TEST_CASE("device checks: a masked reflection copies each element, reflected where the mask says, from any mask byte") {
  const int64_t n = (1 << 20) + 7;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> src(n);
  for (auto& x : src) x = normal(rng);
  std::vector<uint8_t> mask(n + 3);
  for (auto& m : mask) m = static_cast<uint8_t>(rng() & 1);
  DeviceVector<float> s(src), d(std::vector<float>(n, -7.0f));
  DeviceVector<uint8_t> m(mask);
  reflect_copy(d.data, s.data, m.data + 3, n, ElementKind::float32, 0.5);  // an odd offset into the mask
  auto out = d.read();
  int64_t reflected = 0;
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(out[i] == (mask[i + 3] ? 0.5f - src[i] : src[i]));
    reflected += mask[i + 3];
  }
  CHECK(reflected > n / 3);

  // Half types in float arithmetic, rounded once (the caller rounds the centre to the element type, as LibTorch's
  // `c - x` does; 2 is exact).
  std::vector<__half> halves(n);
  for (int64_t i = 0; i < n; ++i) halves[i] = __float2half(src[i]);
  DeviceVector<__half> hs(halves), hd{std::vector<__half>(n)};
  reflect_copy(hd.data, hs.data, m.data, n, ElementKind::float16, 2.0);
  auto hout = hd.read();
  for (int64_t i = 0; i < n; ++i) {
    const __half want = mask[i] ? __float2half(2.0f - __half2float(halves[i])) : halves[i];
    REQUIRE(std::memcmp(&hout[i], &want, sizeof want) == 0);
  }

  // int64 labels of randint(0, 10): x -> 9 - x.
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  DeviceVector<int64_t> ls(labels), ld(std::vector<int64_t>(n, -1));
  reflect_copy(ld.data, ls.data, m.data + 1, n, ElementKind::int64, 9.0);
  auto lout = ld.read();
  for (int64_t i = 0; i < n; ++i) REQUIRE(lout[i] == (mask[i + 1] ? 9 - labels[i] : labels[i]));
}

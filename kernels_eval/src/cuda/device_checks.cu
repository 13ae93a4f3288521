#include "device_checks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace crucible::eval::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

constexpr int kThreads = 256;
// Loads in flight per thread: a streaming pass needs a few MB of reads outstanding to reach the device's bandwidth.
constexpr int kUnroll = 4;

// Enough blocks to fill every multiprocessor, not more: each thread walks the buffer with a grid-sized stride.
unsigned grid_for(int64_t items) {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 8)));
}

// Counters and maxima a pass adds to with one atomic per warp. Maxima are of non-negative doubles, whose bit
// patterns order as the values do.
struct Totals {
  unsigned long long count;
  unsigned long long nan_count;
  unsigned long long max_abs_bits;
  unsigned long long max_rel_bits;
};

// Device memory for one pass's totals, zeroed for it and read back (which waits for the pass) when it is done. One
// buffer per thread and device, kept: allocating and freeing one per pass cost more than a sampled pass itself.
class DeviceTotals {
 public:
  DeviceTotals() {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    thread_local std::map<int, Totals*> buffers;
    Totals*& buffer = buffers[device];
    if (!buffer) check(cudaMalloc(&buffer, sizeof(Totals)), "cudaMalloc (check totals)");
    totals_ = buffer;
    check(cudaMemsetAsync(totals_, 0, sizeof(Totals), nullptr), "cudaMemsetAsync (check totals)");
  }
  Totals* get() { return totals_; }
  Totals read(const char* pass) {
    check(cudaGetLastError(), pass);
    Totals host{};
    check(cudaMemcpy(&host, totals_, sizeof host, cudaMemcpyDeviceToHost), pass);
    return host;
  }

 private:
  Totals* totals_ = nullptr;
};

__device__ unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}
__device__ double warp_max(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

__device__ void add_totals(Totals* t, unsigned long long count, unsigned long long nan_count, double max_abs,
                           double max_rel) {
  count = warp_sum(count);
  nan_count = warp_sum(nan_count);
  max_abs = warp_max(max_abs);
  max_rel = warp_max(max_rel);
  if ((threadIdx.x & 31) != 0) return;
  if (count) atomicAdd(&t->count, count);
  if (nan_count) atomicAdd(&t->nan_count, nan_count);
  if (max_abs > 0) atomicMax(&t->max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(max_abs)));
  if (max_rel > 0) atomicMax(&t->max_rel_bits, static_cast<unsigned long long>(__double_as_longlong(max_rel)));
}

// Element loads in the precision the comparison works in.
template <typename Acc, typename T>
__device__ Acc load(const T* p, int64_t i) { return static_cast<Acc>(p[i]); }
template <>
__device__ float load<float, __half>(const __half* p, int64_t i) { return __half2float(p[i]); }
template <>
__device__ float load<float, __nv_bfloat16>(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

// A grid-stride walk that issues kUnroll independent loads before using any of them.
template <typename Visit>
__device__ void walk(int64_t n, Visit visit) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < n; base += kUnroll * stride) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * stride;
      if (i < n) visit(i);
    }
  }
}

template <typename T, typename Acc>
__global__ void compare_floats(const T* out, const T* ref, int64_t n, Acc atol, Acc rtol, Totals* totals) {
  unsigned long long bad = 0, nan_bad = 0;
  Acc max_abs = 0, max_rel = 0;
  walk(n, [&](int64_t i) {
    const Acc a = load<Acc>(out, i), b = load<Acc>(ref, i);
    const bool a_nan = isnan(a), b_nan = isnan(b);
    if (a_nan || b_nan) {
      bad += a_nan != b_nan;
      nan_bad += a_nan != b_nan;
    } else if (isinf(a) || isinf(b)) {
      bad += a != b;
    } else {
      const Acc diff = fabs(a - b), scale = fabs(b);
      bad += !(diff <= atol + rtol * scale);
      max_abs = fmax(max_abs, diff);
      max_rel = fmax(max_rel, diff / fmax(scale, Acc(1e-12)));
    }
  });
  add_totals(totals, bad, nan_bad, static_cast<double>(max_abs), static_cast<double>(max_rel));
}

template <typename T>
__global__ void compare_integers(const T* out, const T* ref, int64_t n, Totals* totals) {
  unsigned long long bad = 0;
  double max_abs = 0;
  walk(n, [&](int64_t i) {
    const int64_t a = static_cast<int64_t>(out[i]), b = static_cast<int64_t>(ref[i]);
    if (a == b) return;
    ++bad;
    max_abs = fmax(max_abs, fabs(static_cast<double>(a) - static_cast<double>(b)));
  });
  add_totals(totals, bad, 0, max_abs, 0.0);
}

template <typename W>
__global__ void count_different(const W* a, const W* b, int64_t n, Totals* totals) {
  unsigned long long differ = 0;
  walk(n, [&](int64_t i) { differ += a[i] != b[i]; });
  add_totals(totals, differ, 0, 0.0, 0.0);
}

template <typename W>
__global__ void count_equal(const W* data, int64_t n, W pattern, Totals* totals) {
  unsigned long long equal = 0;
  walk(n, [&](int64_t i) { equal += data[i] == pattern; });
  add_totals(totals, equal, 0, 0.0, 0.0);
}

__device__ uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The element a sampled pass touches in block `b`.
__device__ int64_t chosen(int64_t b, int64_t n, int64_t block, uint64_t seed) {
  const int64_t start = b * block, len = n - start < block ? n - start : block;
  return start + static_cast<int64_t>(mix(seed ^ mix(static_cast<uint64_t>(b))) % static_cast<uint64_t>(len));
}

template <typename W>
__global__ void poison_chosen(W* data, int64_t n, W pattern, uint64_t seed, int64_t block, int64_t blocks) {
  walk(blocks, [&](int64_t b) { data[chosen(b, n, block, seed)] = pattern; });
}

template <typename W>
__global__ void count_chosen(const W* data, int64_t n, W pattern, uint64_t seed, int64_t block, int64_t blocks,
                             Totals* totals) {
  unsigned long long equal = 0;
  walk(blocks, [&](int64_t b) { equal += data[chosen(b, n, block, seed)] == pattern; });
  add_totals(totals, equal, 0, 0.0, 0.0);
}

// x -> twice_center - x in the element's own arithmetic (half types through float), so both buffers get the
// same bits from the same bits.
template <typename T>
__device__ T reflected(T x, double twice_center) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(static_cast<T>(twice_center) - x);
  else return static_cast<T>(static_cast<int64_t>(twice_center) - static_cast<int64_t>(x));
}
template <>
__device__ __half reflected(__half x, double twice_center) {
  return __float2half(static_cast<float>(twice_center) - __half2float(x));
}
template <>
__device__ __nv_bfloat16 reflected(__nv_bfloat16 x, double twice_center) {
  return __float2bfloat16(static_cast<float>(twice_center) - __bfloat162float(x));
}

template <typename T>
__global__ void reflect_chosen(T* a, T* b, int64_t n, double twice_center, uint64_t seed, int64_t block,
                               int64_t blocks) {
  walk(blocks, [&](int64_t k) {
    const int64_t i = chosen(k, n, block, seed);
    a[i] = reflected(a[i], twice_center);
    b[i] = reflected(b[i], twice_center);
  });
}

template <typename F>
void by_width(int width, F f) {
  switch (width) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  throw std::invalid_argument("device checks: element width must be 1, 2, 4 or 8 bytes");
}

int64_t blocks_of(int64_t n, int64_t block) {
  if (block < 1) throw std::invalid_argument("device checks: a sampled pass needs a block of at least one element");
  return (n + block - 1) / block;
}

}  // namespace

ElementComparison compare_elements(const void* out, const void* ref, int64_t n, ElementKind kind, double atol,
                                   double rtol) {
  ElementComparison c;
  if (n <= 0) return c;
  DeviceTotals totals;
  const unsigned grid = grid_for(n);
  const float fa = static_cast<float>(atol), fr = static_cast<float>(rtol);
  switch (kind) {
    case ElementKind::float16:
      compare_floats<__half, float><<<grid, kThreads>>>(static_cast<const __half*>(out), static_cast<const __half*>(ref),
                                                        n, fa, fr, totals.get());
      break;
    case ElementKind::bfloat16:
      compare_floats<__nv_bfloat16, float><<<grid, kThreads>>>(static_cast<const __nv_bfloat16*>(out),
                                                               static_cast<const __nv_bfloat16*>(ref), n, fa, fr,
                                                               totals.get());
      break;
    case ElementKind::float32:
      compare_floats<float, float><<<grid, kThreads>>>(static_cast<const float*>(out), static_cast<const float*>(ref),
                                                       n, fa, fr, totals.get());
      break;
    case ElementKind::float64:
      compare_floats<double, double><<<grid, kThreads>>>(static_cast<const double*>(out),
                                                         static_cast<const double*>(ref), n, atol, rtol, totals.get());
      break;
    case ElementKind::int8:
      compare_integers<int8_t><<<grid, kThreads>>>(static_cast<const int8_t*>(out), static_cast<const int8_t*>(ref), n,
                                                   totals.get());
      break;
    case ElementKind::int16:
      compare_integers<int16_t><<<grid, kThreads>>>(static_cast<const int16_t*>(out), static_cast<const int16_t*>(ref),
                                                    n, totals.get());
      break;
    case ElementKind::int32:
      compare_integers<int32_t><<<grid, kThreads>>>(static_cast<const int32_t*>(out), static_cast<const int32_t*>(ref),
                                                    n, totals.get());
      break;
    case ElementKind::int64:
      compare_integers<int64_t><<<grid, kThreads>>>(static_cast<const int64_t*>(out), static_cast<const int64_t*>(ref),
                                                    n, totals.get());
      break;
  }
  const Totals t = totals.read("compare on device");
  c.mismatched = static_cast<int64_t>(t.count);
  c.nan_mismatched = static_cast<int64_t>(t.nan_count);
  std::memcpy(&c.max_abs, &t.max_abs_bits, sizeof c.max_abs);
  std::memcpy(&c.max_rel, &t.max_rel_bits, sizeof c.max_rel);
  return c;
}

bool same_device_bytes(const void* a, const void* b, std::size_t bytes) {
  if (bytes == 0) return true;
  DeviceTotals totals;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  if (pa % 8 == 0 && pb % 8 == 0 && bytes % 8 == 0) {
    const auto n = static_cast<int64_t>(bytes / 8);
    count_different<<<grid_for(n), kThreads>>>(static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b), n,
                                               totals.get());
  } else {
    const auto n = static_cast<int64_t>(bytes);
    count_different<<<grid_for(n), kThreads>>>(static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n,
                                               totals.get());
  }
  return totals.read("byte comparison on device").count == 0;
}

int64_t count_pattern(const void* data, int64_t n, int width, uint64_t pattern) {
  if (n <= 0) return 0;
  DeviceTotals totals;
  by_width(width, [&](auto w) {
    using W = decltype(w);
    count_equal<W><<<grid_for(n), kThreads>>>(static_cast<const W*>(data), n, static_cast<W>(pattern), totals.get());
  });
  return static_cast<int64_t>(totals.read("poison count on device").count);
}

void poison_sampled(void* data, int64_t n, int width, uint64_t pattern, uint64_t seed, int64_t block) {
  if (n <= 0) return;
  const int64_t blocks = blocks_of(n, block);
  by_width(width, [&](auto w) {
    using W = decltype(w);
    poison_chosen<W><<<grid_for(blocks), kThreads>>>(static_cast<W*>(data), n, static_cast<W>(pattern), seed, block,
                                                    blocks);
  });
  check(cudaGetLastError(), "sampled poison on device");
}

int64_t count_pattern_sampled(const void* data, int64_t n, int width, uint64_t pattern, uint64_t seed, int64_t block) {
  if (n <= 0) return 0;
  const int64_t blocks = blocks_of(n, block);
  DeviceTotals totals;
  by_width(width, [&](auto w) {
    using W = decltype(w);
    count_chosen<W><<<grid_for(blocks), kThreads>>>(static_cast<const W*>(data), n, static_cast<W>(pattern), seed,
                                                   block, blocks, totals.get());
  });
  return static_cast<int64_t>(totals.read("sampled poison count on device").count);
}

void reflect_sampled(void* a, void* b, int64_t n, ElementKind kind, double twice_center, uint64_t seed, int64_t block) {
  if (n <= 0) return;
  const int64_t blocks = blocks_of(n, block);
  const unsigned grid = grid_for(blocks);
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    reflect_chosen<T><<<grid, kThreads>>>(static_cast<T*>(a), static_cast<T*>(b), n, twice_center, seed, block, blocks);
  };
  switch (kind) {
    case ElementKind::float16: launch(__half{}); break;
    case ElementKind::bfloat16: launch(__nv_bfloat16{}); break;
    case ElementKind::float32: launch(float{}); break;
    case ElementKind::float64: launch(double{}); break;
    case ElementKind::int8: launch(int8_t{}); break;
    case ElementKind::int16: launch(int16_t{}); break;
    case ElementKind::int32: launch(int32_t{}); break;
    case ElementKind::int64: launch(int64_t{}); break;
  }
  check(cudaGetLastError(), "sampled input change on device");
}

}  // namespace crucible::eval::cuda

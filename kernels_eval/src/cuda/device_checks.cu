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

// Pairs of elements at the same index of two buffers. Both 16-byte aligned (the arena's slots and LibTorch's
// allocations are): read 16 bytes at a time, kUnroll loads of each buffer in flight per thread, which takes a
// comparison from about 2.0 to about 3 TB/s on an H100; the elements past the last whole 16 bytes, or every
// element when a buffer is not aligned, one at a time. `visit(x, y)` gets the two elements.
template <typename T, typename Visit>
__device__ void walk_pairs(const T* a, const T* b, int64_t n, bool aligned, Visit visit) {
  constexpr int kPerChunk = 16 / sizeof(T);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = aligned ? n / kPerChunk : 0;
  const auto* ca = reinterpret_cast<const uint4*>(a);
  const auto* cb = reinterpret_cast<const uint4*>(b);
  for (int64_t base = first; base < chunks; base += kUnroll * stride) {
    uint4 xa[kUnroll], xb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * stride;
      if (c < chunks) {
        xa[u] = ca[c];
        xb[u] = cb[c];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * stride >= chunks) continue;
      const T* ea = reinterpret_cast<const T*>(&xa[u]);
      const T* eb = reinterpret_cast<const T*>(&xb[u]);
#pragma unroll
      for (int k = 0; k < kPerChunk; ++k) visit(ea[k], eb[k]);
    }
  }
  for (int64_t i = chunks * kPerChunk + first; i < n; i += stride) visit(a[i], b[i]);
}

bool aligned16(const void* a, const void* b) {
  return reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

template <typename Acc, typename T>
__device__ Acc widen(T x) { return static_cast<Acc>(x); }
template <>
__device__ float widen<float, __half>(__half x) { return __half2float(x); }
template <>
__device__ float widen<float, __nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// The relative error is reported, not judged: float32 takes the fast division (within 2 ulp).
__device__ float quotient(float x, float y) { return __fdividef(x, y); }
__device__ double quotient(double x, double y) { return x / y; }

template <typename T, typename Acc>
__global__ void compare_floats(const T* out, const T* ref, int64_t n, bool aligned, Acc atol, Acc rtol,
                               Totals* totals) {
  unsigned long long bad = 0, nan_bad = 0;
  Acc max_abs = 0, max_rel = 0;
  walk_pairs(out, ref, n, aligned, [&](T raw_a, T raw_b) {
    const Acc a = widen<Acc>(raw_a), b = widen<Acc>(raw_b);
    const Acc diff = fabs(a - b), scale = fabs(b);
    // The common case first, with few instructions: a finite reference and an output within tolerance (false for
    // a NaN on either side or an infinite output). A pass counted by instructions rather than bytes ran at 2 TB/s.
    if (!isinf(scale) && diff <= atol + rtol * scale) {
      max_abs = fmax(max_abs, diff);
      if (diff > Acc(0)) max_rel = fmax(max_rel, quotient(diff, fmax(scale, Acc(1e-12))));
      return;
    }
    const bool a_nan = isnan(a), b_nan = isnan(b);
    if (a_nan || b_nan) {
      bad += a_nan != b_nan;
      nan_bad += a_nan != b_nan;
    } else if (isinf(a) || isinf(b)) {
      bad += a != b;
    } else {
      ++bad;
      max_abs = fmax(max_abs, diff);
      max_rel = fmax(max_rel, quotient(diff, fmax(scale, Acc(1e-12))));
    }
  });
  add_totals(totals, bad, nan_bad, static_cast<double>(max_abs), static_cast<double>(max_rel));
}

template <typename T>
__global__ void compare_integers(const T* out, const T* ref, int64_t n, bool aligned, Totals* totals) {
  unsigned long long bad = 0;
  double max_abs = 0;
  walk_pairs(out, ref, n, aligned, [&](T raw_a, T raw_b) {
    const int64_t a = static_cast<int64_t>(raw_a), b = static_cast<int64_t>(raw_b);
    if (a == b) return;
    ++bad;
    max_abs = fmax(max_abs, fabs(static_cast<double>(a) - static_cast<double>(b)));
  });
  add_totals(totals, bad, 0, max_abs, 0.0);
}

template <typename W>
__global__ void count_different(const W* a, const W* b, int64_t n, bool aligned, Totals* totals) {
  unsigned long long differ = 0;
  walk_pairs(a, b, n, aligned, [&](W x, W y) { differ += x != y; });
  add_totals(totals, differ, 0, 0.0, 0.0);
}

// The fingerprint's terms for 16 bytes at chunk index c: two products per lane of words offset by values only the
// key's holder can derive from c (multilinear hashing, as in NH), so moving, swapping or changing words changes
// the sums.
__device__ uint32_t fmix32(uint32_t h) {  // MurmurHash3's finaliser
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

__device__ void add_chunk(uint4 x, uint64_t c, uint64_t key, unsigned long long& s0, unsigned long long& s1) {
  const uint32_t r = fmix32(static_cast<uint32_t>(c) ^ static_cast<uint32_t>(key) ^
                            (static_cast<uint32_t>(c >> 32) * 0x9e3779b9u));
  const uint32_t q = fmix32(r ^ static_cast<uint32_t>(key >> 32));
  s0 += static_cast<unsigned long long>(x.x + r) * (x.y ^ q) + static_cast<unsigned long long>(x.z + q) * (x.w ^ r);
  s1 += static_cast<unsigned long long>(x.x ^ q) * (x.y + r) + static_cast<unsigned long long>(x.z ^ r) * (x.w + q);
}

// 16 bytes of chunk c, zero-padded past `bytes`; byte by byte unless whole and 16-byte aligned.
__device__ uint4 load_chunk(const unsigned char* p, int64_t c, int64_t bytes, bool aligned) {
  if (aligned && (c + 1) * 16 <= bytes) return reinterpret_cast<const uint4*>(p)[c];
  uint32_t w[4] = {0, 0, 0, 0};
  for (int k = 0; k < 16 && c * 16 + k < bytes; ++k) w[k / 4] |= static_cast<uint32_t>(p[c * 16 + k]) << (8 * (k % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ void store_chunk(unsigned char* p, int64_t c, int64_t bytes, bool aligned, uint4 x) {
  if (aligned && (c + 1) * 16 <= bytes) {
    reinterpret_cast<uint4*>(p)[c] = x;
    return;
  }
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
  for (int k = 0; k < 16 && c * 16 + k < bytes; ++k)
    p[c * 16 + k] = static_cast<unsigned char>(w[k / 4] >> (8 * (k % 4)));
}

// A fingerprint's two lanes travel in a pass's totals (count and nan_count), added modulo 2^64.
__device__ void add_lanes(Totals* t, unsigned long long s0, unsigned long long s1) {
  s0 = warp_sum(s0);
  s1 = warp_sum(s1);
  if ((threadIdx.x & 31) != 0) return;
  atomicAdd(&t->count, s0);
  atomicAdd(&t->nan_count, s1);
}
Fingerprint lanes_of(const Totals& t) {
  Fingerprint f;
  f.lanes[0] = t.count;
  f.lanes[1] = t.nan_count;
  return f;
}

// One pass over the chunks of `src`, kUnroll loads in flight per thread; copied to `dst` when it is given.
__global__ void fingerprint_chunks(const unsigned char* src, unsigned char* dst, int64_t bytes, bool aligned,
                                   uint64_t key, Totals* totals) {
  const int64_t chunks = (bytes + 15) / 16;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long s0 = 0, s1 = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < chunks;
       base += kUnroll * stride) {
    uint4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < chunks) x[u] = load_chunk(src, base + u * stride, bytes, aligned);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * stride;
      if (c >= chunks) continue;
      if (dst) store_chunk(dst, c, bytes, aligned, x[u]);
      add_chunk(x[u], static_cast<uint64_t>(c), key, s0, s1);
    }
  }
  add_lanes(totals, s0, s1);
}

Fingerprint run_fingerprint(const void* src, void* dst, std::size_t bytes, uint64_t key, const char* pass) {
  if (bytes == 0) return {};
  DeviceTotals totals;
  const bool aligned = aligned16(src, dst ? dst : src);
  const auto chunks = static_cast<int64_t>((bytes + 15) / 16);
  fingerprint_chunks<<<grid_for(chunks), kThreads>>>(static_cast<const unsigned char*>(src),
                                                     static_cast<unsigned char*>(dst), static_cast<int64_t>(bytes),
                                                     aligned, key, totals.get());
  return lanes_of(totals.read(pass));
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

// A sampled pass touches, in each span of `block` runs, one run of consecutive elements filling one 128-byte cache
// line (32 floats): as many elements as one per `block`, in a run-aligned place chosen by a hash of (seed, span).
// Scattered accesses cost the memory about one row activation each (on an H100 about 3 G per second, which made a
// reflection of single elements in a 6.4 GB tensor and its copy take 270 us per timed call); a run of a line costs
// one, so a line per span takes 32 times fewer for floats.
constexpr int kRunBytes = 128;
// The first element of the run chosen in span `b`; the run ends at `run` elements or at n.
__device__ int64_t chosen(int64_t b, int64_t n, int64_t block, int run, uint64_t seed) {
  const int64_t span = block * run, start = b * span, len = n - start < span ? n - start : span;
  const int64_t runs = (len + run - 1) / run;
  return start + run * static_cast<int64_t>(mix(seed ^ mix(static_cast<uint64_t>(b))) % static_cast<uint64_t>(runs));
}

template <typename W>
__global__ void poison_chosen(W* data, int64_t n, W pattern, uint64_t seed, int64_t block, int64_t spans) {
  constexpr int kRun = kRunBytes / sizeof(W);
  walk(spans, [&](int64_t b) {
    const int64_t i = chosen(b, n, block, kRun, seed);
#pragma unroll
    for (int k = 0; k < kRun; ++k)
      if (i + k < n) data[i + k] = pattern;
  });
}

template <typename W>
__global__ void count_chosen(const W* data, int64_t n, W pattern, uint64_t seed, int64_t block, int64_t spans,
                             Totals* totals) {
  constexpr int kRun = kRunBytes / sizeof(W);
  unsigned long long equal = 0;
  walk(spans, [&](int64_t b) {
    const int64_t i = chosen(b, n, block, kRun, seed);
#pragma unroll
    for (int k = 0; k < kRun; ++k) equal += i + k < n && data[i + k] == pattern;
  });
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
__global__ void reflect_masked(const T* __restrict__ src, const uint8_t* __restrict__ mask, T* __restrict__ dst,
                               int64_t n, double twice_center) {
  walk(n, [&](int64_t i) {
    const T x = src[i];
    dst[i] = mask[i] ? reflected(x, twice_center) : x;
  });
}

// Reflects the chosen run of every span in place and adds to `totals` how the buffer's fingerprint under `key`
// changed: the 16-byte chunks a run covers are fingerprinted before and after (one thread per run, and runs of
// different spans share no chunk), so an expected fingerprint can follow the change without a copy of the buffer.
template <typename T>
__global__ void reflect_chosen(T* data, int64_t n, bool aligned, double twice_center, uint64_t seed, int64_t block,
                               int64_t spans, uint64_t key, Totals* totals) {
  constexpr int kRun = kRunBytes / sizeof(T);
  const auto* raw = reinterpret_cast<const unsigned char*>(data);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T)), chunks = (bytes + 15) / 16;
  unsigned long long before0 = 0, before1 = 0, after0 = 0, after1 = 0;
  walk(spans, [&](int64_t s) {
    const int64_t i = chosen(s, n, block, kRun, seed);
    const int64_t first = i * static_cast<int64_t>(sizeof(T)) / 16;
    const int64_t end = min(((i + kRun) * static_cast<int64_t>(sizeof(T)) + 15) / 16, chunks);
    for (int64_t c = first; c < end; ++c) add_chunk(load_chunk(raw, c, bytes, aligned), c, key, before0, before1);
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      if (i + k >= n) break;
      data[i + k] = reflected(data[i + k], twice_center);
    }
    for (int64_t c = first; c < end; ++c) add_chunk(load_chunk(raw, c, bytes, aligned), c, key, after0, after1);
  });
  add_lanes(totals, after0 - before0, after1 - before1);
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

// `f` called with a value of the element type `kind` names.
template <typename F>
void by_kind(ElementKind kind, F f) {
  switch (kind) {
    case ElementKind::float16: f(__half{}); return;
    case ElementKind::bfloat16: f(__nv_bfloat16{}); return;
    case ElementKind::float32: f(float{}); return;
    case ElementKind::float64: f(double{}); return;
    case ElementKind::int8: f(int8_t{}); return;
    case ElementKind::int16: f(int16_t{}); return;
    case ElementKind::int32: f(int32_t{}); return;
    case ElementKind::int64: f(int64_t{}); return;
  }
  throw std::invalid_argument("device checks: unknown element kind");
}

// Spans of `block` runs of kRunBytes over n elements of `width` bytes.
int64_t spans_of(int64_t n, int64_t block, int width) {
  if (block < 1) throw std::invalid_argument("device checks: a sampled pass needs a block of at least one element");
  const int64_t span = block * (kRunBytes / width);
  return (n + span - 1) / span;
}

}  // namespace

ElementComparison compare_elements(const void* out, const void* ref, int64_t n, ElementKind kind, double atol,
                                   double rtol) {
  ElementComparison c;
  if (n <= 0) return c;
  DeviceTotals totals;
  const unsigned grid = grid_for(n);
  const float fa = static_cast<float>(atol), fr = static_cast<float>(rtol);
  const bool aligned = aligned16(out, ref);
  switch (kind) {
    case ElementKind::float16:
      compare_floats<__half, float><<<grid, kThreads>>>(static_cast<const __half*>(out), static_cast<const __half*>(ref),
                                                        n, aligned, fa, fr, totals.get());
      break;
    case ElementKind::bfloat16:
      compare_floats<__nv_bfloat16, float><<<grid, kThreads>>>(static_cast<const __nv_bfloat16*>(out),
                                                               static_cast<const __nv_bfloat16*>(ref), n, aligned, fa,
                                                               fr, totals.get());
      break;
    case ElementKind::float32:
      compare_floats<float, float><<<grid, kThreads>>>(static_cast<const float*>(out), static_cast<const float*>(ref),
                                                       n, aligned, fa, fr, totals.get());
      break;
    case ElementKind::float64:
      compare_floats<double, double><<<grid, kThreads>>>(static_cast<const double*>(out),
                                                         static_cast<const double*>(ref), n, aligned, atol, rtol,
                                                         totals.get());
      break;
    case ElementKind::int8:
      compare_integers<int8_t><<<grid, kThreads>>>(static_cast<const int8_t*>(out), static_cast<const int8_t*>(ref), n,
                                                   aligned, totals.get());
      break;
    case ElementKind::int16:
      compare_integers<int16_t><<<grid, kThreads>>>(static_cast<const int16_t*>(out), static_cast<const int16_t*>(ref),
                                                    n, aligned, totals.get());
      break;
    case ElementKind::int32:
      compare_integers<int32_t><<<grid, kThreads>>>(static_cast<const int32_t*>(out), static_cast<const int32_t*>(ref),
                                                    n, aligned, totals.get());
      break;
    case ElementKind::int64:
      compare_integers<int64_t><<<grid, kThreads>>>(static_cast<const int64_t*>(out), static_cast<const int64_t*>(ref),
                                                    n, aligned, totals.get());
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
  const bool aligned = aligned16(a, b);
  if (aligned && bytes % 8 == 0) {
    const auto n = static_cast<int64_t>(bytes / 8);
    count_different<<<grid_for(n / 2), kThreads>>>(static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b), n,
                                                   true, totals.get());
  } else {
    const auto n = static_cast<int64_t>(bytes);
    count_different<<<grid_for(n), kThreads>>>(static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n,
                                               aligned, totals.get());
  }
  return totals.read("byte comparison on device").count == 0;
}

Fingerprint fingerprint(const void* data, std::size_t bytes, uint64_t key) {
  return run_fingerprint(data, nullptr, bytes, key, "fingerprint on device");
}

Fingerprint copy_with_fingerprint(void* dst, const void* src, std::size_t bytes, uint64_t key) {
  return run_fingerprint(src, dst, bytes, key, "copy with fingerprint on device");
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
  const int64_t spans = spans_of(n, block, width);
  by_width(width, [&](auto w) {
    using W = decltype(w);
    poison_chosen<W><<<grid_for(spans), kThreads>>>(static_cast<W*>(data), n, static_cast<W>(pattern), seed, block,
                                                   spans);
  });
  check(cudaGetLastError(), "sampled poison on device");
}

int64_t count_pattern_sampled(const void* data, int64_t n, int width, uint64_t pattern, uint64_t seed, int64_t block) {
  if (n <= 0) return 0;
  const int64_t spans = spans_of(n, block, width);
  DeviceTotals totals;
  by_width(width, [&](auto w) {
    using W = decltype(w);
    count_chosen<W><<<grid_for(spans), kThreads>>>(static_cast<const W*>(data), n, static_cast<W>(pattern), seed,
                                                  block, spans, totals.get());
  });
  return static_cast<int64_t>(totals.read("sampled poison count on device").count);
}

Fingerprint reflect_sampled(void* data, int64_t n, ElementKind kind, double twice_center, uint64_t seed,
                            int64_t block, uint64_t key) {
  if (n <= 0) return {};
  DeviceTotals totals;
  const bool aligned = aligned16(data, data);
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    const int64_t spans = spans_of(n, block, sizeof(T));
    reflect_chosen<T><<<grid_for(spans), kThreads>>>(static_cast<T*>(data), n, aligned, twice_center, seed, block,
                                                     spans, key, totals.get());
  };
  by_kind(kind, launch);
  return lanes_of(totals.read("sampled input change on device"));
}

void reflect_copy(void* dst, const void* src, const uint8_t* mask, int64_t n, ElementKind kind, double twice_center) {
  if (n <= 0) return;
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    reflect_masked<T><<<grid_for(n), kThreads>>>(static_cast<const T*>(src), mask, static_cast<T*>(dst), n,
                                                 twice_center);
  };
  by_kind(kind, launch);
  check(cudaGetLastError(), "input refresh on device");
}

}  // namespace crucible::eval::cuda

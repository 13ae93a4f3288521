#pragma once
// The evaluator's passes over device tensors, each one kernel reading each byte once: comparing an output with the
// reference, comparing bytes, counting poison, and the sampled checks of timed calls on tensors of several GB
// (poison and input changes at one random 128-byte run per span of runs). LibTorch's element-wise operators take
// ten or more passes for a comparison; at KernelBench's sizes those passes, not the candidate, set an evaluation's
// time. Everything runs on the default stream, where LibTorch works, and returns once its result is on the host.
// Built from device_checks.cu with the CUDA toolkit, or from device_checks_absent.cpp without it.
#include <cstddef>
#include <cstdint>

namespace crucible::eval::cuda {

// How the elements of a buffer are read: floating kinds compare within a tolerance, integer kinds exactly.
enum class ElementKind { float16, bfloat16, float32, float64, int8, int16, int32, int64 };

struct ElementComparison {
  int64_t mismatched = 0;      // outside tolerance, NaN against a number, or unequal infinities
  int64_t nan_mismatched = 0;  // NaN where the reference has a number (or the other way round)
  double max_abs = 0.0;        // over pairs of finite values
  double max_rel = 0.0;
};

// The CPU's rule: |out - ref| <= atol + rtol * |ref| for finite pairs, in float32 for 16- and 32-bit floats and
// in float64 otherwise; integers must be equal (their largest difference is reported).
ElementComparison compare_elements(const void* out, const void* ref, int64_t n, ElementKind kind, double atol,
                                   double rtol);
// Whether two device buffers hold the same bytes.
bool same_device_bytes(const void* a, const void* b, std::size_t bytes);
// A keyed fingerprint of a buffer's bytes: two 64-bit sums of products of its 32-bit words offset by values derived
// from the key and each word's place (NH-style multilinear hashing, the lanes pairing words differently). The key is
// the evaluator's secret and never leaves it, so a change cannot be aimed at an unchanged fingerprint. Checking an input against its fingerprint reads it once,
// where comparing it with a copy reads twice as many bytes.
struct Fingerprint {
  uint64_t lanes[2] = {0, 0};
  bool operator==(const Fingerprint& o) const { return lanes[0] == o.lanes[0] && lanes[1] == o.lanes[1]; }
  Fingerprint& operator+=(const Fingerprint& change) {  // a change returned by reflect_sampled, modulo 2^64
    lanes[0] += change.lanes[0];
    lanes[1] += change.lanes[1];
    return *this;
  }
};
Fingerprint fingerprint(const void* data, std::size_t bytes, uint64_t key);
// Copies `bytes` from src to dst and returns the fingerprint of what was copied, in the one pass the copy makes.
Fingerprint copy_with_fingerprint(void* dst, const void* src, std::size_t bytes, uint64_t key);
// Elements of `width` bytes (1, 2, 4 or 8) equal to `pattern`, over the whole buffer.
int64_t count_pattern(const void* data, int64_t n, int width, uint64_t pattern);

// The sampled checks. A buffer of n elements is cut into spans of `block` runs, a run being the elements of one
// 128-byte cache line (32 floats, 64 halves); in each span one run, chosen by a hash of (seed, span), is touched: one
// element in `block` overall. The candidate cannot tell which until it reads the whole buffer.
void poison_sampled(void* data, int64_t n, int width, uint64_t pattern, uint64_t seed, int64_t block);
int64_t count_pattern_sampled(const void* data, int64_t n, int width, uint64_t pattern, uint64_t seed, int64_t block);
// Reflects the chosen run of every span about the distribution's centre (x -> twice_center - x; integers
// x -> twice_center - x as well), in place, and returns how the buffer's fingerprint under `key` changed: lanes to
// add, modulo 2^64, to the fingerprint it had, which then matches the buffer again unless something else wrote to it.
Fingerprint reflect_sampled(void* data, int64_t n, ElementKind kind, double twice_center, uint64_t seed,
                            int64_t block, uint64_t key);
// dst[i] = mask[i] ? twice_center - src[i] : src[i] over n elements, in one pass (the element arithmetic of
// reflect_sampled: half types through float, twice_center taken as given): a fresh input of several GB from a pool
// window. LibTorch's where() over the same took five
// passes and a byte mask converted to bool, about four times the memory traffic; the reference's timing makes one
// per sample. `mask` holds 0 or 1 per element, at any byte offset. Queued on the default stream; returns at once.
void reflect_copy(void* dst, const void* src, const uint8_t* mask, int64_t n, ElementKind kind, double twice_center);

}  // namespace crucible::eval::cuda

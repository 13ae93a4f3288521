// A build without the CUDA toolkit: the device passes are never reached (no device can be named), and say why if
// they are.
#include <stdexcept>

#include "device_checks.h"

namespace crucible::eval::cuda {
namespace {
[[noreturn]] void absent() { throw std::runtime_error("this build of Crucible has no CUDA support"); }
}  // namespace

ElementComparison compare_elements(const void*, const void*, int64_t, ElementKind, double, double) { absent(); }
bool same_device_bytes(const void*, const void*, std::size_t) { absent(); }
Fingerprint fingerprint(const void*, std::size_t, uint64_t) { absent(); }
Fingerprint copy_with_fingerprint(void*, const void*, std::size_t, uint64_t) { absent(); }
int64_t count_pattern(const void*, int64_t, int, uint64_t) { absent(); }
void poison_sampled(void*, int64_t, int, uint64_t, uint64_t, int64_t) { absent(); }
int64_t count_pattern_sampled(const void*, int64_t, int, uint64_t, uint64_t, int64_t) { absent(); }
Fingerprint reflect_sampled(void*, int64_t, ElementKind, double, uint64_t, int64_t, uint64_t) { absent(); }
void reflect_copy(void*, const void*, const uint8_t*, int64_t, ElementKind, double) { absent(); }
}  // namespace crucible::eval::cuda

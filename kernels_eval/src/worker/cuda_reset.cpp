// The CUDA worker's reset between candidates (docs/cuda.md, "Reusing a worker"). Runs in the worker after the
// candidate's library is closed; the evaluator checks the answer and the process image from outside.
#include "cuda_reset.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker_self_test.h"
#ifdef CRUCIBLE_WITH_CUPTI
#include "kernel_coverage.h"
#endif
#include "self_test_device.h"
#include "worker_device.h"

namespace crucible::eval::worker {
namespace {

std::map<void*, std::size_t> g_live;           // allocations made by the candidate and not freed
std::vector<cudaLibrary_t> g_libraries;        // device libraries the candidate loaded
void* g_self_test_word = nullptr;              // the worker's own 8 bytes for the self-test

// Device settings a candidate could change and that would apply to the next one.
struct DeviceState {
  std::array<size_t, 7> limits{};  // every cudaLimit, StackSize through PersistingL2CacheSize
  cudaFuncCache cache = cudaFuncCachePreferNone;
  unsigned flags = 0;
  bool operator==(const DeviceState& o) const { return limits == o.limits && cache == o.cache && flags == o.flags; }
};
DeviceState g_baseline;

bool read_state(DeviceState& s) {
  for (int i = 0; i < static_cast<int>(s.limits.size()); ++i)
    if (cudaDeviceGetLimit(&s.limits[i], static_cast<cudaLimit>(i)) != cudaSuccess) s.limits[i] = SIZE_MAX;
  cudaGetLastError();  // a limit the device does not have is left out, the same way each time
  return cudaDeviceGetCacheConfig(&s.cache) == cudaSuccess && cudaGetDeviceFlags(&s.flags) == cudaSuccess;
}

bool fail(std::string& why, const std::string& text) {
  why = text;
  return false;
}

// Device memory: every tracked allocation freed, and the default pool's stream-ordered memory all returned.
bool memory_is_back(std::string& why) {
  if (!g_live.empty())
    return fail(why, std::to_string(g_live.size()) + " device allocation(s) of the candidate were not freed");
  cudaMemPool_t pool = nullptr;
  uint64_t used = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess)
    return fail(why, "cannot read the device memory pool");
  if (used != 0) return fail(why, "the device memory pool still holds " + std::to_string(used) + " bytes");
  cudaMemPoolTrimTo(pool, 0);
  return true;
}

}  // namespace

void note_allocation(void* ptr, std::size_t bytes) { g_live[ptr] = bytes; }
void note_free(void* ptr) { g_live.erase(ptr); }
void note_library(cudaLibrary_t library) { g_libraries.push_back(library); }

bool record_device_baseline(std::string& error) {
  g_live.clear();
  if (cudaMalloc(&g_self_test_word, sizeof(uint64_t)) != cudaSuccess) return fail(error, "self-test memory");
  g_live.clear();  // the worker's own word is not the candidate's
  if (!read_state(g_baseline)) return fail(error, "cannot read the device's limits and configuration");
  // Once before the sandbox: the self-test's module is loaded on its first launch.
  uint64_t sum = 0;
  return run_self_test(1, g_self_test_word, own_stream(), sum, error) && sum == self_test::expected(1);
}

bool reset_device(uint64_t challenge, uint64_t& checksum, std::string& why) {
  // A kernel still running ends here or at the watchdog; an error means the context cannot be trusted.
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail(why, cudaGetErrorName(e));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(why, cudaGetErrorName(e));
  // A split build's device library is not unloaded with its host library: the worker unloads it.
  for (cudaLibrary_t library : g_libraries)
    if (cudaLibraryUnload(library) != cudaSuccess) return fail(why, "cannot unload a device library");
  g_libraries.clear();
  if (!memory_is_back(why)) return false;
  DeviceState now;
  if (!read_state(now) || !(now == g_baseline)) return fail(why, "device limits or configuration changed");
#ifdef CRUCIBLE_WITH_CUPTI
  coverage::forget_own_kernels();
#endif
  return run_self_test(challenge, g_self_test_word, own_stream(), checksum, why);
}

}  // namespace crucible::eval::worker

// A split build loads its device code here (crucible/fast_launch.h); the worker notes the library to unload it.
extern "C" __attribute__((visibility("default"))) cudaError_t cudaLibraryLoadData(
    cudaLibrary_t* library, const void* code, cudaJitOption* jit_options, void** jit_values, unsigned jit_count,
    cudaLibraryOption* options, void** values, unsigned count) {
  using Fn = cudaError_t (*)(cudaLibrary_t*, const void*, cudaJitOption*, void**, unsigned, cudaLibraryOption*,
                             void**, unsigned);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "cudaLibraryLoadData"));
  if (!real) return cudaErrorNotSupported;
  cudaError_t e = real(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (e == cudaSuccess && library) crucible::eval::worker::note_library(*library);
  return e;
}

#include "kernel_coverage.h"

#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <dlfcn.h>

#include <cstdlib>
#include <set>
#include <string>

namespace crucible::eval::worker::coverage {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;
bool g_ready = false;
std::set<std::string>* g_own_kernels = nullptr;  // device names the candidate registered
uint64_t g_own_ns = 0, g_other_ns = 0;

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        const bool own = g_own_kernels && k->name && g_own_kernels->count(k->name) > 0;
        (own ? g_own_ns : g_other_ns) += k->end - k->start;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        g_other_ns += m->end - m->start;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        g_other_ns += m->end - m->start;
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

}  // namespace

bool start() {
  if (!g_own_kernels) g_own_kernels = new std::set<std::string>();
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return false;
  // One full cycle now, while system calls are still free: whatever CUPTI sets up on first use exists before the
  // sandbox is sealed.
  for (auto kind : kKinds)
    if (cuptiActivityEnable(kind) != CUPTI_SUCCESS) return false;
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (auto kind : kKinds) cuptiActivityDisable(kind);
  g_own_ns = g_other_ns = 0;
  g_ready = true;
  return true;
}

void add_own_kernel(const char* name) {
  if (!g_own_kernels) g_own_kernels = new std::set<std::string>();
  if (name) g_own_kernels->insert(name);
}

void begin_call() {
  if (!g_ready) return;
  g_own_ns = g_other_ns = 0;
  for (auto kind : kKinds) cuptiActivityEnable(kind);
}

void forget_own_kernels() {
  if (g_own_kernels) g_own_kernels->clear();
}

double end_call() {
  if (!g_ready) return -1.0;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (auto kind : kKinds) cuptiActivityDisable(kind);
  const uint64_t total = g_own_ns + g_other_ns;
  return total > 0 ? static_cast<double>(g_own_ns) / static_cast<double>(total) : -1.0;
}

}  // namespace crucible::eval::worker::coverage

// The candidate's fat binary registers each of its kernels through this runtime entry point as its library loads;
// the worker exports its own definition (the dynamic linker prefers it) to learn the names, then forwards the call.
using RegisterFunctionFn = void (*)(void**, const char*, char*, const char*, int, void*, void*, void*, void*, int*);

extern "C" __attribute__((visibility("default"))) void __cudaRegisterFunction(void** handle, const char* host_fun,
                                                                              char* device_fun, const char* device_name,
                                                                              int thread_limit, void* tid, void* bid,
                                                                              void* block_dim, void* grid_dim,
                                                                              int* warp_size) {
  static auto real = reinterpret_cast<RegisterFunctionFn>(dlsym(RTLD_NEXT, "__cudaRegisterFunction"));
  if (device_name) {
    if (!crucible::eval::worker::coverage::g_own_kernels)
      crucible::eval::worker::coverage::g_own_kernels = new std::set<std::string>();
    crucible::eval::worker::coverage::g_own_kernels->insert(device_name);
  }
  if (real) real(handle, host_fun, device_fun, device_name, thread_limit, tid, bid, block_dim, grid_dim, warp_size);
}

#ifdef CRUCIBLE_LEARNS_LIBRARY_KERNELS
// A split-built candidate (crucible/fast_launch.h) resolves its kernels through this call as its library loads:
// the names it gets handles for are its own. Recorded only when the kernel exists in a library it loaded.
using LibraryGetKernelFn = cudaError_t (*)(cudaKernel_t*, cudaLibrary_t, const char*);

extern "C" __attribute__((visibility("default"))) cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel,
                                                                                   cudaLibrary_t library,
                                                                                   const char* name) {
  static auto real = reinterpret_cast<LibraryGetKernelFn>(dlsym(RTLD_NEXT, "cudaLibraryGetKernel"));
  if (!real) return cudaErrorNotSupported;
  const cudaError_t result = real(kernel, library, name);
  if (result == cudaSuccess && name) crucible::eval::worker::coverage::add_own_kernel(name);
  return result;
}
#endif

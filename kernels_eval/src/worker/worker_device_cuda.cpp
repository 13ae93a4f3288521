// The CUDA worker: one context on one GPU, created before the job arrives; tensors in device memory lent by the
// evaluator through a CUDA IPC handle; each call bracketed by events on the candidate's stream and followed by
// a full device synchronisation, so work on any other stream is finished before the worker answers.
#include <cuda_runtime.h>
#include <dirent.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_reset.h"
#include "kernel_coverage.h"
#include "worker_device.h"

namespace crucible::eval::worker {
namespace {

cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr, g_end = nullptr;

// The candidate's cudaMalloc calls land here (the worker exports these names, and the dynamic linker prefers
// the executable's definitions), so an allocation failure is reported as out-of-memory even when the candidate
// swallows the error and returns its own code.
using MallocFn = cudaError_t (*)(void**, size_t);
using MallocAsyncFn = cudaError_t (*)(void**, size_t, cudaStream_t);
MallocFn g_real_malloc = nullptr;
MallocAsyncFn g_real_malloc_async = nullptr;
size_t g_failed_allocation = 0;

bool fail(std::string& error, const char* what, cudaError_t e) {
  error = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return false;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void note_error(protocol::Control* c, cudaError_t e, const std::string& text) {
  c->cuda_error = static_cast<int32_t>(e);
  std::snprintf(c->cuda_error_text, sizeof c->cuda_error_text, "%s", text.c_str());
  c->rc = protocol::kDeviceErrorRc;
}

// The GPU driver's device files this process holds open (/dev/nvidia*): the descriptors it issues ioctls on, and
// the paths it may open again.
struct OpenFile {
  int fd;
  std::string path;
};
std::vector<OpenFile> driver_files() {
  std::vector<OpenFile> files;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return files;
  while (dirent* entry = readdir(dir)) {
    char link[64], target[256];
    std::snprintf(link, sizeof link, "/proc/self/fd/%s", entry->d_name);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strncmp(target, "/dev/nvidia", 11) == 0) files.push_back({std::atoi(entry->d_name), target});
  }
  closedir(dir);
  return files;
}

}  // namespace

StartTimes g_start_times;

bool start_device(int argc, char** argv, std::string& error) {
  int device = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
  g_real_malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_NEXT, "cudaMalloc"));
  g_real_malloc_async = reinterpret_cast<MallocAsyncFn>(dlsym(RTLD_NEXT, "cudaMallocAsync"));
  if (!g_real_malloc || !g_real_malloc_async) {
    error = "cannot find the CUDA runtime's allocation functions";
    return false;
  }
  const auto began = std::chrono::steady_clock::now();
  auto us_since = [](std::chrono::steady_clock::time_point t) {
    return static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t).count());
  };
  if (auto e = cudaSetDevice(device); e != cudaSuccess) return fail(error, "cudaSetDevice", e);
  // Spinning while the device works: the end of a call is seen at once, and no blocking system calls are needed.
  if (auto e = cudaSetDeviceFlags(cudaDeviceScheduleSpin); e != cudaSuccess) return fail(error, "cudaSetDeviceFlags", e);
  if (auto e = cudaFree(nullptr); e != cudaSuccess) return fail(error, "creating the CUDA context", e);
  g_start_times.context_us = us_since(began);
  if (auto e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking); e != cudaSuccess)
    return fail(error, "cudaStreamCreate", e);
  if (auto e = cudaEventCreate(&g_start); e != cudaSuccess) return fail(error, "cudaEventCreate", e);
  if (auto e = cudaEventCreate(&g_end); e != cudaSuccess) return fail(error, "cudaEventCreate", e);
  // Stream-ordered allocation sets up the device's memory pool on first use, opening files: done here, before the
  // sandbox, so that a candidate's cudaMallocAsync works in the sealed worker.
  void* warm = nullptr;
  if (auto e = g_real_malloc_async(&warm, 256, g_stream); e != cudaSuccess) return fail(error, "cudaMallocAsync", e);
  if (auto e = cudaFreeAsync(warm, g_stream); e != cudaSuccess) return fail(error, "cudaFreeAsync", e);
  if (auto e = cudaStreamSynchronize(g_stream); e != cudaSuccess) return fail(error, "cudaStreamSynchronize", e);
#ifdef CRUCIBLE_WITH_CUPTI
  const auto profiler_began = std::chrono::steady_clock::now();
  coverage::start();  // without it, coverage is reported as unknown
  g_start_times.profiler_us = us_since(profiler_began);
#endif
  return true;
}

StartTimes start_times() { return g_start_times; }

cudaStream_t own_stream() { return g_stream; }

char* attach_tensors(const protocol::LoadRequest& request, char*, std::string& error) {
  if (request.cuda_device < 0) {
    error = "a CUDA worker needs device memory from the evaluator";
    return nullptr;
  }
  cudaIpcMemHandle_t handle;
  static_assert(sizeof handle == protocol::kIpcHandleBytes, "IPC handle size");
  std::memcpy(&handle, request.device_arena_handle, sizeof handle);
  void* base = nullptr;
  if (auto e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    fail(error, "cudaIpcOpenMemHandle", e);
    return nullptr;
  }
  return static_cast<char*>(base);
}

bool drops_identity() { return false; }

std::vector<std::string> device_files() {
  std::vector<std::string> paths;
  for (const auto& open_file : driver_files())
    if (std::find(paths.begin(), paths.end(), open_file.path) == paths.end()) paths.push_back(open_file.path);
  return paths;
}

bool limits_address_space() { return false; }

double spin_window_seconds() { return 0.25; }

SyscallNeeds syscall_needs() {
  SyscallNeeds needs;
  // The driver's own threads wait on its descriptors; the runtime yields while spinning.
  needs.syscalls = {SYS_sched_yield, SYS_poll, SYS_ppoll, SYS_read, SYS_write, SYS_epoll_wait, SYS_epoll_pwait,
                    SYS_clock_gettime, SYS_clock_nanosleep, SYS_nanosleep, SYS_sched_getaffinity, SYS_getrusage};
  for (const auto& open_file : driver_files()) needs.ioctl_fds.push_back(open_file.fd);
  return needs;
}

bool run_call(ForwardFn forward, crucible_tensor* in, int num_inputs, crucible_tensor* out, int num_outputs,
              protocol::Control* c) {
  g_failed_allocation = 0;
  const bool profile = forward && c->profile;
#ifdef CRUCIBLE_WITH_CUPTI
  if (profile) coverage::begin_call();
#endif
  c->seen_ns = now_ns();
  cudaEventRecord(g_start, g_stream);
  int rc = forward ? forward(in, num_inputs, out, num_outputs, g_stream) : 0;
  cudaEventRecord(g_end, g_stream);
  c->launched_ns = now_ns();
  cudaError_t e = cudaDeviceSynchronize();
  c->synced_ns = now_ns();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess && g_failed_allocation > 0) e = cudaErrorMemoryAllocation;
  if (e != cudaSuccess) {
    std::string text = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    if (g_failed_allocation > 0)
      text = "out of memory: cudaMalloc of " + std::to_string(g_failed_allocation) + " bytes failed";
    note_error(c, e, text);
    return false;
  }
  c->own_kernel_share = -1.0f;
#ifdef CRUCIBLE_WITH_CUPTI
  if (profile) c->own_kernel_share = static_cast<float>(coverage::end_call());
#endif
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, g_start, g_end);
  c->device_ms = ms;
  c->rc = rc;
  return true;
}

}  // namespace crucible::eval::worker

extern "C" __attribute__((visibility("default"))) cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  cudaError_t e = crucible::eval::worker::g_real_malloc(ptr, bytes);
  if (e == cudaErrorMemoryAllocation) crucible::eval::worker::g_failed_allocation = bytes;
  if (e == cudaSuccess && ptr) crucible::eval::worker::note_allocation(*ptr, bytes);
  return e;
}

// The frees are the worker's too, so that a reset knows what the candidate still holds (cuda_reset.cpp).
extern "C" __attribute__((visibility("default"))) cudaError_t cudaFree(void* ptr) {
  using Fn = cudaError_t (*)(void*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "cudaFree"));
  cudaError_t e = real(ptr);
  if (e == cudaSuccess) crucible::eval::worker::note_free(ptr);
  return e;
}

extern "C" __attribute__((visibility("default"))) cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  using Fn = cudaError_t (*)(void*, cudaStream_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "cudaFreeAsync"));
  cudaError_t e = real(ptr, stream);
  if (e == cudaSuccess) crucible::eval::worker::note_free(ptr);
  return e;
}

extern "C" __attribute__((visibility("default"))) cudaError_t cudaMallocAsync(void** ptr, size_t bytes,
                                                                              cudaStream_t stream) {
  cudaError_t e = crucible::eval::worker::g_real_malloc_async(ptr, bytes, stream);
  if (e == cudaErrorMemoryAllocation) crucible::eval::worker::g_failed_allocation = bytes;
  if (e == cudaSuccess && ptr) crucible::eval::worker::note_allocation(*ptr, bytes);
  return e;
}

#include "cuda_device.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace crucible::eval::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  char uuid[64];
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  info.uuid = uuid;
  check(cudaDriverGetVersion(&info.driver_version), "cudaDriverGetVersion");
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice");
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  check(cudaSetDevice(previous), "cudaSetDevice");
  return info;
}

void use_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

SharedDeviceMemory::~SharedDeviceMemory() {
  if (data_) cudaFree(data_);
}

void SharedDeviceMemory::reserve(std::size_t bytes) {
  // A whole number of 2 MiB pages: a process that imports an allocation of any other size through CUDA IPC (the
  // worker) was measured streaming it at half speed on an H100, as if mapped with small pages.
  constexpr std::size_t kLargePage = std::size_t{2} << 20;
  bytes = (bytes + kLargePage - 1) / kLargePage * kLargePage;
  if (bytes <= bytes_) return;
  if (data_) check(cudaFree(data_), "cudaFree");
  data_ = nullptr;
  bytes_ = 0;
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc (tensor arena)");
  data_ = static_cast<std::byte*>(p);
  bytes_ = bytes;
}

std::array<uint8_t, 64> SharedDeviceMemory::ipc_handle() const {
  static_assert(sizeof(cudaIpcMemHandle_t) == 64, "IPC handle size");
  cudaIpcMemHandle_t handle;
  check(cudaIpcGetMemHandle(&handle, data_), "cudaIpcGetMemHandle");
  std::array<uint8_t, 64> out{};
  std::memcpy(out.data(), &handle, sizeof handle);
  return out;
}

L2Flush::L2Flush(std::size_t l2_bytes) : bytes_(2 * l2_bytes) {
  check(cudaMalloc(&buffer_, bytes_), "cudaMalloc (L2 flush buffer)");
}

L2Flush::~L2Flush() {
  if (buffer_) cudaFree(buffer_);
}

void L2Flush::run() {
  value_ ^= 0x5a;  // a different value each time, so no write can be elided
  check(cudaMemsetAsync(buffer_, value_, bytes_, nullptr), "cudaMemsetAsync (L2 flush)");
}

EventTimer::EventTimer() {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start() { check(cudaEventRecord(static_cast<cudaEvent_t>(start_), nullptr), "cudaEventRecord"); }
void EventTimer::stop() { check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), nullptr), "cudaEventRecord"); }

double EventTimer::seconds() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
        "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace crucible::eval::cuda

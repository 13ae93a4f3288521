#include "cuda_device.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

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

CurrentDevice::CurrentDevice(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  use_device(device);
}

CurrentDevice::~CurrentDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

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

void SharedDeviceMemory::release() {
  if (data_) check(cudaFree(data_), "cudaFree");
  data_ = nullptr;
  bytes_ = 0;
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

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// Releases a hold that has lasted past its limit. One thread for the timer's life, asleep unless a hold is on.
struct HeldTimer::Watchdog {
  std::mutex m;
  std::condition_variable cv;
  uint32_t armed = 0;  // the sequence number held now; 0: none
  std::chrono::steady_clock::time_point deadline;
  bool fired = false, quit = false;
  std::thread thread;
};

HeldTimer::HeldTimer(double limit_s) : limit_s_(limit_s) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  void* host = nullptr;
  void* device = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || cudaHostAlloc(&host, 64, cudaHostAllocMapped) != cudaSuccess ||
      cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) {
    cudaGetLastError();
    if (host) cudaFreeHost(host);
    return;  // not available(): the caller times as launched
  }
  wait_ = fn;
  word_ = static_cast<uint32_t*>(host);
  *word_ = 0;
  device_word_ = reinterpret_cast<unsigned long long>(device);
  watchdog_ = new Watchdog;
  watchdog_->thread = std::thread([this, w = watchdog_] {
    std::unique_lock lock(w->m);
    while (!w->quit) {
      if (!w->armed) {
        w->cv.wait(lock);
        continue;
      }
      const uint32_t held = w->armed;
      if (w->cv.wait_until(lock, w->deadline) == std::cv_status::timeout && w->armed == held) {
        release(held);
        w->fired = true;
        w->armed = 0;
      }
    }
  });
}

HeldTimer::~HeldTimer() {
  if (watchdog_) {
    release(sequence_);  // nothing may wait on the word once it is freed
    {
      std::lock_guard lock(watchdog_->m);
      watchdog_->quit = true;
    }
    watchdog_->cv.notify_all();
    watchdog_->thread.join();
    delete watchdog_;
  }
  if (word_) cudaFreeHost(word_);
}

void HeldTimer::release(uint32_t value) { __atomic_store_n(word_, value, __ATOMIC_SEQ_CST); }

void HeldTimer::start() {
  if (!wait_) throw std::logic_error("HeldTimer::start without a stream wait (check available())");
  const uint32_t seq = ++sequence_;
  {
    std::lock_guard lock(watchdog_->m);
    watchdog_->armed = seq;
    watchdog_->fired = false;
    watchdog_->deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                               std::chrono::duration<double>(limit_s_));
  }
  watchdog_->cv.notify_all();
  const CUresult r = reinterpret_cast<WaitValueFn>(wait_)(nullptr, device_word_, seq, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) throw std::runtime_error("cuStreamWaitValue32 failed with CUresult " + std::to_string(r));
  events_.start();
  launch_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void HeldTimer::stop() {
  events_.stop();
  launch_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - launch_s_;
  {
    // Disarmed before the release, so the watchdog cannot fire between them and report a miss that was none.
    std::lock_guard lock(watchdog_->m);
    missed_ = watchdog_->fired;
    watchdog_->armed = 0;
  }
  watchdog_->cv.notify_all();
  release(sequence_);
}


}  // namespace crucible::eval::cuda

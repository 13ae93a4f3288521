#pragma once
// The evaluator's few direct CUDA runtime calls (no torch here): device facts, memory it lends to a worker
// through an IPC handle, an L2 flush, and event timing on the default stream, where LibTorch works.
// Built from cuda_device.cpp with the CUDA toolkit, or from cuda_device_absent.cpp without it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace crucible::eval::cuda {

bool built_with_cuda();
int device_count();  // 0 without a driver, a GPU, or CUDA support in this build

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  std::size_t l2_bytes = 0;
  std::size_t total_bytes = 0, free_bytes = 0;
  std::string uuid;  // "GPU-8-4-4-4-12 hex digits", as CUDA_VISIBLE_DEVICES names a device
  int driver_version = 0;  // the CUDA version the driver supports, as 1000 * major + 10 * minor
};
DeviceInfo device_info(int device);  // throws std::runtime_error with the CUDA error
void use_device(int device);         // for this thread's later CUDA calls

// This thread's CUDA calls go to `device` for the scope, then to the device they went to before.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};
void synchronize();                  // this process's work on the current device

// Device memory owned by the evaluator and mapped by one worker at a time.
class SharedDeviceMemory {
 public:
  SharedDeviceMemory() = default;
  ~SharedDeviceMemory();
  SharedDeviceMemory(const SharedDeviceMemory&) = delete;
  SharedDeviceMemory& operator=(const SharedDeviceMemory&) = delete;
  void reserve(std::size_t bytes);  // grows, never shrinks; contents are not preserved on growth
  void release();                   // frees it all (reserve makes it again)
  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  std::array<uint8_t, 64> ipc_handle() const;

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Writes a buffer larger than the device's L2 cache, so a timed call starts with none of its data cached.
class L2Flush {
 public:
  explicit L2Flush(std::size_t l2_bytes);
  ~L2Flush();
  L2Flush(const L2Flush&) = delete;
  L2Flush& operator=(const L2Flush&) = delete;
  void run();  // asynchronous on the default stream
  std::size_t bytes() const { return bytes_; }

 private:
  void* buffer_ = nullptr;
  std::size_t bytes_ = 0;
  int value_ = 0;
};

// Device time between start() and stop() on the default stream; seconds() waits for stop().
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  double seconds();

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// Queued launches for the evaluator's own work (references): start() makes the default stream wait on a word in
// mapped host memory, then records the start event; stop() records the stop event and writes the word, releasing
// the work launched in between at once. So seconds() is the work's device time without the host's launching in it,
// and launch_seconds() is the launching itself. Work that waits for the GPU while launching would wait for ever: a
// watchdog releases a hold that lasts past `limit_s`, and missed() says so.
class HeldTimer {
 public:
  explicit HeldTimer(double limit_s = 0.25);
  ~HeldTimer();
  HeldTimer(const HeldTimer&) = delete;
  HeldTimer& operator=(const HeldTimer&) = delete;
  bool available() const { return wait_ != nullptr; }  // the driver can make a stream wait on memory
  void start();
  void stop();
  double seconds() { return events_.seconds(); }  // waits for stop()'s event
  double launch_seconds() const { return launch_s_; }
  bool missed() const { return missed_; }

 private:
  void release(uint32_t value);
  double limit_s_;
  void* wait_ = nullptr;        // cuStreamWaitValue32
  uint32_t* word_ = nullptr;    // mapped host memory
  unsigned long long device_word_ = 0;
  uint32_t sequence_ = 0;
  double launch_s_ = 0.0;
  bool missed_ = false;
  EventTimer events_;
  struct Watchdog;
  Watchdog* watchdog_ = nullptr;
};

}  // namespace crucible::eval::cuda

#pragma once
// Exclusive use of a device. An evaluator holds its device's lease while it times a candidate; a policy that
// computes on the same device (a language model sharing the GPU) holds it while it samples or trains, so overlap
// between stages never disturbs a timing.
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "crucible/eval/device.h"

namespace crucible::devices {

class DeviceLeases {
 public:
  class Lease {
   public:
    Lease(DeviceLeases* owner, eval::Device device) : owner_(owner), device_(device) {}
    Lease(Lease&& other) noexcept : owner_(other.owner_), device_(other.device_) { other.owner_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_) owner_->release(device_);
    }

   private:
    DeviceLeases* owner_;
    eval::Device device_;
  };

  // Blocks until the device is free; the lease ends with the returned object. No device (a policy that computes
  // nowhere worth guarding) returns at once.
  Lease acquire(std::optional<eval::Device> device);
  // Seconds callers spent waiting for each device, for the run's stage accounting.
  double waited_seconds(eval::Device device) const;

 private:
  void release(eval::Device device);

  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::map<eval::Device, bool> held_;
  std::map<eval::Device, double> waited_;
};

}  // namespace crucible::devices

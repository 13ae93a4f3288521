#pragma once
// Exclusive use of a device. An evaluator holds its device's lease while it times a candidate; a policy that
// computes on the same device (a language model sharing the GPU) holds it while it samples or trains, so overlap
// between stages never disturbs a timing.
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

namespace crucible::devices {

class DeviceLeases {
 public:
  class Lease {
   public:
    Lease(DeviceLeases* owner, std::string device) : owner_(owner), device_(std::move(device)) {}
    Lease(Lease&& other) noexcept : owner_(other.owner_), device_(std::move(other.device_)) { other.owner_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_) owner_->release(device_);
    }

   private:
    DeviceLeases* owner_;
    std::string device_;
  };

  // Blocks until the device is free; the lease ends with the returned object. An empty device name is no device
  // (a policy that computes nowhere worth guarding) and returns at once.
  Lease acquire(const std::string& device);
  // Seconds callers spent waiting for each device, for the run's stage accounting.
  double waited_seconds(const std::string& device) const;

 private:
  void release(const std::string& device);

  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::map<std::string, bool> held_;
  std::map<std::string, double> waited_;
};

}  // namespace crucible::devices

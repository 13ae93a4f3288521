#pragma once
// Exclusive use of a device. An evaluator holds its device's lease while it times a candidate; a policy that
// computes on the same device (a language model sharing the GPU) holds it while it samples or trains, so overlap
// between stages never disturbs a timing. Memory is handed over with the device: when the other party takes it, a
// hook registered for that handover runs first (the evaluator gives back its arena and input pools before the policy
// samples; the policy's cached memory is given back before a candidate's worker allocates).
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "crucible/eval/device.h"

namespace crucible::devices {

// Who holds a device: its evaluators (one party however many) or the policy (its generator and optimizer).
enum class Party { evaluator, policy };

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
  // nowhere worth guarding) returns at once. When the device's last holder was the other party, the hook for this
  // handover runs before acquire returns (under the lease; what it throws reaches the caller, the lease released, and
  // the next acquire by that party runs it again). A hook may take other devices' leases, never this device's.
  Lease acquire(std::optional<eval::Device> device, Party party = Party::evaluator);
  // What runs when `to` takes `device` from the other party (replacing any hook set before).
  void on_handover(eval::Device device, Party to, std::function<void()> hook);
  // Seconds callers spent waiting for each device, for the run's stage accounting.
  double waited_seconds(eval::Device device) const;

 private:
  void release(eval::Device device);

  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::map<eval::Device, bool> held_;
  std::map<eval::Device, double> waited_;
  std::map<eval::Device, std::optional<Party>> last_party_;
  std::map<std::pair<eval::Device, Party>, std::function<void()>> handover_;
};

}  // namespace crucible::devices

#include "devices/device_lease.h"

#include <chrono>

namespace crucible::devices {

DeviceLeases::Lease DeviceLeases::acquire(std::optional<eval::Device> device) {
  if (!device) return Lease(nullptr, eval::Device::cpu());
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  freed_.wait(lock, [&] { return !held_[*device]; });
  held_[*device] = true;
  waited_[*device] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Lease(this, *device);
}

double DeviceLeases::waited_seconds(eval::Device device) const {
  std::lock_guard lock(mutex_);
  auto it = waited_.find(device);
  return it == waited_.end() ? 0.0 : it->second;
}

void DeviceLeases::release(eval::Device device) {
  {
    std::lock_guard lock(mutex_);
    held_[device] = false;
  }
  freed_.notify_all();
}

}  // namespace crucible::devices

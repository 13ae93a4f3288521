#include "devices/device_lease.h"

#include <chrono>

namespace crucible::devices {

DeviceLeases::Lease DeviceLeases::acquire(std::optional<eval::Device> device, Party party) {
  if (!device) return Lease(nullptr, eval::Device::cpu());
  const auto start = std::chrono::steady_clock::now();
  std::function<void()> hook;
  std::optional<Party> previous;
  {
    std::unique_lock lock(mutex_);
    freed_.wait(lock, [&] { return !held_[*device]; });
    waited_[*device] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto& last = last_party_[*device];
    if (last && *last != party)
      if (auto it = handover_.find({*device, party}); it != handover_.end()) hook = it->second;
    previous = last;
    last = party;
    held_[*device] = true;  // last: nothing above that may throw leaves the device held
  }
  Lease lease(this, *device);
  if (!hook) return lease;
  try {
    hook();  // the device is held: no one else computes on it meanwhile
  } catch (...) {
    std::lock_guard lock(mutex_);
    last_party_[*device] = previous;  // not handed over: the next acquire by this party tries again
    throw;
  }
  return lease;
}

void DeviceLeases::on_handover(eval::Device device, Party to, std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  handover_[{device, to}] = std::move(hook);
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

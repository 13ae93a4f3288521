// Device leases: one holder per device at a time, other devices independent, no device never waits.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "devices/device_lease.h"

using namespace crucible;

TEST_CASE("a device lease is exclusive until released") {
  devices::DeviceLeases leases;
  std::atomic<bool> second_holds{false};
  std::thread other;
  {
    auto lease = leases.acquire(eval::Device::cuda(0));
    other = std::thread([&] {
      auto l = leases.acquire(eval::Device::cuda(0));
      second_holds = true;
    });
    auto cpu = leases.acquire(eval::Device::cpu());  // another device: free at once
    auto none = leases.acquire(std::nullopt);    // no device: never waits
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(second_holds.load());
  }
  other.join();
  CHECK(second_holds.load());
  CHECK(leases.waited_seconds(eval::Device::cuda(0)) >= 0.09);
  CHECK(leases.waited_seconds(eval::Device::cpu()) < 0.05);
}

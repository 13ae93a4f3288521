// Device leases: one holder per device at a time, other devices independent, no device never waits; a handover
// between the evaluator and the policy runs its hook, a lease taken again by the same party runs none.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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

TEST_CASE("a handover of a device between evaluator and policy runs the hook for the party taking it") {
  using devices::Party;
  devices::DeviceLeases leases;
  const auto gpu = eval::Device::cuda(0), other = eval::Device::cuda(1);
  std::vector<std::string> ran;
  leases.on_handover(gpu, Party::policy, [&] { ran.push_back("to policy"); });
  leases.on_handover(gpu, Party::evaluator, [&] { ran.push_back("to evaluator"); });
  const struct {
    eval::Device device;
    Party party;
    std::vector<std::string> after;  // every hook run so far
  } steps[] = {
      {gpu, Party::evaluator, {}},                      // the first holder: nothing to hand over
      {gpu, Party::evaluator, {}},                      // the same party again
      {gpu, Party::policy, {"to policy"}},              // the evaluator's memory goes first
      {gpu, Party::policy, {"to policy"}},              // the generator, then the optimizer: one party
      {other, Party::evaluator, {"to policy"}},         // another device has hooks of its own (none)
      {gpu, Party::evaluator, {"to policy", "to evaluator"}},
      {other, Party::policy, {"to policy", "to evaluator"}},
      {gpu, Party::policy, {"to policy", "to evaluator", "to policy"}},
  };
  for (const auto& step : steps) {
    CAPTURE(step.device.name());
    auto lease = leases.acquire(step.device, step.party);
    CHECK(ran == step.after);
  }
  // A hook that throws reaches the caller with the lease released, and the handover is tried again next time.
  leases.on_handover(gpu, Party::evaluator, [] { throw std::runtime_error("no memory given back"); });
  CHECK_THROWS_WITH_AS(leases.acquire(gpu, Party::evaluator), "no memory given back", std::runtime_error);
  leases.on_handover(gpu, Party::evaluator, [&] { ran.push_back("to evaluator, again"); });
  {
    auto again = leases.acquire(gpu, Party::evaluator);  // not left held, and handed over now
    CHECK(ran.back() == "to evaluator, again");
  }
  // A hook may take other devices' leases (the evaluator's hook waits for the other GPUs' timings).
  leases.on_handover(gpu, Party::policy, [&] {
    auto held = leases.acquire(other, Party::evaluator);
    ran.push_back("to policy, holding the other");
  });
  auto last = leases.acquire(gpu, Party::policy);
  CHECK(ran.back() == "to policy, holding the other");
}

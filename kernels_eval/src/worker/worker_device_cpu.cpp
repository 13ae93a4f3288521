// The CPU worker: tensors live in the shared host arena and a call is a plain function call.
#include "worker_device.h"

#include "worker_self_test.h"

namespace crucible::eval::worker {

bool start_device(int, char**, std::string&) { return true; }
StartTimes start_times() { return {}; }

char* attach_tensors(const protocol::LoadRequest&, char* host_arena, std::string&) { return host_arena; }

std::vector<std::string> device_files() { return {}; }

bool limits_address_space() { return true; }

bool drops_identity() { return true; }

// CPU calls are timed by the worker's CPU clock, which a spinning harness would inflate; waking from the futex
// costs wall time only.
double spin_window_seconds() { return 0.0; }

SyscallNeeds syscall_needs() { return {}; }

bool run_call(ForwardFn forward, crucible_tensor* in, int num_inputs, crucible_tensor* out, int num_outputs,
              protocol::Control* control) {
  control->rc = forward ? forward(in, num_inputs, out, num_outputs, nullptr) : 0;
  return true;
}

// A CPU worker has no device state; its self-test runs on the host.
bool record_device_baseline(std::string&) { return true; }

bool reset_device(uint64_t challenge, uint64_t& checksum, std::string&) {
  checksum = self_test::expected(challenge);
  return true;
}

}  // namespace crucible::eval::worker

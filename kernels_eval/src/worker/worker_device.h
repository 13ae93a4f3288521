#pragma once
// What differs between a CPU worker and a CUDA worker: the device context, where tensors live, the system calls
// the sealed process still needs, and how one call runs. worker_main.cpp holds everything they share.
#include <string>
#include <vector>

#include "crucible/eval/worker_protocol.h"
#include "crucible/kernel.h"

namespace crucible::eval::worker {

using ForwardFn = decltype(&crucible_forward);

// Before the hello, so that a prestarted worker has its device context ready when a job arrives.
bool start_device(int argc, char** argv, std::string& error);
// How long start_device spent creating the device's context and starting the profiler, in microseconds.
struct StartTimes {
  uint32_t context_us = 0, profiler_us = 0;
};
StartTimes start_times();

// The base that the request's tensor offsets are relative to: the host arena, or device memory the evaluator
// shares with this worker.
char* attach_tensors(const protocol::LoadRequest& request, char* host_arena, std::string& error);

// How long the worker spins after a call before it sleeps: a GPU evaluation prepares each timed call for
// milliseconds (fresh inputs, L2 flush), and a sleeping worker would wake late.
double spin_window_seconds();

// Started as root, the worker gives up root for nobody before it loads the candidate (owner permissions would let it
// read root's private files). The CUDA worker keeps its identity: the driver's device files and the IPC handle's
// memory are set up for the evaluator's user.
bool drops_identity();

// Files beyond the candidate's library and those already mapped that the confined worker may still open, read
// and write (Landlock, docs/evaluation.md): the GPU driver's device files, which it may reopen after the context is
// up. None for the CPU worker.
std::vector<std::string> device_files();

// CUDA reserves terabytes of virtual addresses: an address-space limit cannot apply there.
bool limits_address_space();

// What the sealed worker still needs beyond the common allowlist: system calls, and the descriptors on which
// ioctl is allowed (the GPU driver's).
struct SyscallNeeds {
  std::vector<long> syscalls;
  std::vector<int> ioctl_fds;
};
SyscallNeeds syscall_needs();

// One call on a set of tensors, or a null call when `forward` is null. Fills rc and device_ms in the control
// block; false when the device is unusable and the worker must end (the error is in the control block).
bool run_call(ForwardFn forward, crucible_tensor* in, int num_inputs, crucible_tensor* out, int num_outputs,
              protocol::Control* control);

// Reusable workers (docs/cuda.md, "Reusing a worker"). After the trusted setup: record the device's state that a
// candidate could change and that would outlive it. After the candidate is unloaded: check that state is back,
// then run the self-test on `challenge` (worker_self_test.h) and return its sum. False with the reason when
// anything differs: the evaluator then ends the worker.
bool record_device_baseline(std::string& error);
bool reset_device(uint64_t challenge, uint64_t& checksum, std::string& why);

}  // namespace crucible::eval::worker

#pragma once
// seccomp-bpf filters for the worker process (x86-64), applied to all of its threads. A refused system call
// is trapped, not executed: the worker notes its number and dies of SIGSYS, which the evaluator reports as a
// rejection naming the call.
#include <sys/types.h>

#include <utility>
#include <vector>

namespace crucible::eval {

// System calls that fail with an error number instead of being trapped: an interpreter probes (is this a terminal,
// may I make this directory) where a refusal with EROFS or ENOTTY is the honest answer and a trap would end it.
struct SoftRefusals {
  std::vector<std::pair<long, int>> fail_with_errno;  // system call, errno
  bool ioctl_elsewhere_enotty = false;                // ioctl on descriptors other than the device's: ENOTTY
};

// Before the candidate is loaded (its static constructors run then): only what dlopen needs (read-only
// opens, reads, file status, memory) and one send on the worker's socket. No new processes, no network,
// no signals to others, no writing anywhere. `extra` and `ioctl_fds` are a device's needs (the GPU driver's).
bool install_load_stage_filter(int socket_fd, const std::vector<long>& extra = {},
                               const std::vector<int>& ioctl_fds = {}, const SoftRefusals& soft = {});

// Before the first call: only memory management, futex, exit, the signals a crash needs, and a device's needs.
bool install_run_stage_filter(pid_t self, const std::vector<long>& extra = {}, const std::vector<int>& ioctl_fds = {},
                              const SoftRefusals& soft = {});

// Instead of the run stage, for a worker that may serve further candidates (docs/cuda.md, "Reusing a worker"): the
// run stage's calls plus what loading the next candidate needs, which the load stage already allows a candidate's
// constructors (read-only opens within the file rules, reads, file status, close, sends on the socket), and no
// prctl or seccomp.
bool install_reuse_stage_filter(int socket_fd, pid_t self, const std::vector<long>& extra = {},
                                const std::vector<int>& ioctl_fds = {});

}  // namespace crucible::eval

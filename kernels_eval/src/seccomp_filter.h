#pragma once
// seccomp-bpf filters for the worker process (x86-64). Both stages kill the whole process with SIGSYS
// on a refused system call, which the evaluator reports as a rejection.
#include <sys/types.h>

namespace crucible::eval {

// Before the candidate is loaded (its static constructors run then): only what dlopen needs (read-only
// opens, reads, file status, memory) and one send on the worker's socket. No new processes, no network,
// no signals to others, no writing anywhere.
bool install_load_stage_filter(int socket_fd);

// Before the first call: only memory management, futex, exit, and the signals a crash needs.
bool install_run_stage_filter(pid_t self);

}  // namespace crucible::eval

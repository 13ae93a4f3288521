#pragma once
// seccomp-bpf filters for the worker process (x86-64). Both stages kill the whole process with SIGSYS
// on a refused system call, which the evaluator reports as a rejection.
#include <sys/types.h>

namespace crucible::eval {

// Before the candidate is loaded (its static constructors run then): no new processes, no network,
// no signals to others, no opening files for writing, no tracing.
bool install_load_stage_filter();

// Before the first call: only memory management, futex, exit, and the signals a crash needs.
bool install_run_stage_filter(pid_t self);

}  // namespace crucible::eval

// What the Triton worker (Python) needs from native code, as a C interface it loads with ctypes: the same seccomp
// stages, file confinement, crash notes and CUPTI kernel accounting as the CUDA worker, so both sandboxes are one
// implementation.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "crucible/eval/landlock.h"
#include "crash_notes.h"
#include "seccomp_filter.h"
#ifdef CRUCIBLE_WITH_CUPTI
#include "kernel_coverage.h"
#endif

namespace {
crucible::eval::SoftRefusals soft_of(const long* soft, int k);
std::vector<long> syscalls_of(const long* syscalls, int n) { return {syscalls, syscalls + (n > 0 ? n : 0)}; }
std::vector<int> fds_of(const int* fds, int n) { return {fds, fds + (n > 0 ? n : 0)}; }
}  // namespace

#define CRUCIBLE_SUPPORT extern "C" __attribute__((visibility("default")))

namespace {
// An interpreter's probes get honest errors instead of traps: ioctl elsewhere than the GPU driver (is this a
// terminal?) ENOTTY, and the pairs (system call, errno) in `soft` (mkdir: EROFS, where a directory may exist).
crucible::eval::SoftRefusals soft_of(const long* soft, int k) {
  crucible::eval::SoftRefusals s;
  s.ioctl_elsewhere_enotty = true;
  for (int i = 0; i + 1 < 2 * k; i += 2) s.fail_with_errno.emplace_back(soft[i], static_cast<int>(soft[i + 1]));
  return s;
}
}  // namespace

CRUCIBLE_SUPPORT int crucible_seal_load_stage(int socket_fd, const long* syscalls, int n, const int* ioctl_fds, int m,
                                              const long* soft, int k) {
  return crucible::eval::install_load_stage_filter(socket_fd, syscalls_of(syscalls, n), fds_of(ioctl_fds, m),
                                                   soft_of(soft, k))
             ? 0
             : -1;
}

CRUCIBLE_SUPPORT int crucible_seal_run_stage(int pid, const long* syscalls, int n, const int* ioctl_fds, int m,
                                             const long* soft, int k) {
  return crucible::eval::install_run_stage_filter(pid, syscalls_of(syscalls, n), fds_of(ioctl_fds, m),
                                                  soft_of(soft, k))
             ? 0
             : -1;
}

// Confines the calling thread, the interpreter's main thread where the candidate's code runs, and whatever it starts
// later, to the system's files, the GPU driver's, its own /proc/self and `read_only` (the Python's trees, Crucible's
// package, the candidate's build directory): read-only except the device files and /dev/null. The driver's threads,
// started before, stay as they were; they run no candidate code. Returns 0 when confined, 1 where this kernel has
// no Landlock (the worker then runs as it did without it), -1 with `error` set when a rule fails.
CRUCIBLE_SUPPORT int crucible_confine_files(const char* const* read_only, int n, char* error, int error_bytes) {
  auto report = [&](const std::string& text) {
    if (error && error_bytes > 0) {
      const std::size_t size = std::min(text.size(), static_cast<std::size_t>(error_bytes - 1));
      std::memcpy(error, text.data(), size);
      error[size] = '\0';
    }
    return -1;
  };
  if (crucible::eval::landlock_abi() == 0) return 1;
  crucible::eval::FileRules rules;
  rules.read_only = crucible::eval::system_files();
  for (int i = 0; i < n; ++i)
    if (read_only[i]) rules.read_only.emplace_back(read_only[i]);
  crucible::eval::allow_gpu_driver(rules);
  std::string text;
  const int ruleset = crucible::eval::build_file_rules(rules, text);
  if (ruleset < 0) return report(text);
  const bool entered = crucible::eval::allow_own_proc(ruleset) && crucible::eval::enter_file_rules(ruleset);
  close(ruleset);
  return entered ? 0 : report("landlock_restrict_self failed");
}

CRUCIBLE_SUPPORT void crucible_note_crashes(void* control) {
  crucible::eval::worker::install_crash_notes(static_cast<crucible::eval::protocol::Control*>(control));
}

// Kernel accounting: -1 (or false) where this build has no CUPTI.
CRUCIBLE_SUPPORT int crucible_coverage_start() {
#ifdef CRUCIBLE_WITH_CUPTI
  return crucible::eval::worker::coverage::start() ? 0 : -1;
#else
  return -1;
#endif
}

CRUCIBLE_SUPPORT void crucible_coverage_own_kernel(const char* name) {
#ifdef CRUCIBLE_WITH_CUPTI
  crucible::eval::worker::coverage::add_own_kernel(name);
#else
  (void)name;
#endif
}

CRUCIBLE_SUPPORT void crucible_coverage_begin() {
#ifdef CRUCIBLE_WITH_CUPTI
  crucible::eval::worker::coverage::begin_call();
#endif
}

CRUCIBLE_SUPPORT double crucible_coverage_end() {
#ifdef CRUCIBLE_WITH_CUPTI
  return crucible::eval::worker::coverage::end_call();
#else
  return -1.0;
#endif
}

// The control block's layout, so the Python side can check its own mirror of it before trusting a single field.
CRUCIBLE_SUPPORT int crucible_protocol_layout(int64_t* out, int n) {
  using namespace crucible::eval::protocol;
  const int64_t values[] = {
      sizeof(Control), offsetof(Control, go), offsetof(Control, worker_sleeping), offsetof(Control, set),
      offsetof(Control, profile), offsetof(Control, done), offsetof(Control, rc), offsetof(Control, crash_signal),
      offsetof(Control, crash_code), offsetof(Control, crash_origin), offsetof(Control, crash_address),
      offsetof(Control, device_ms), offsetof(Control, seen_ns), offsetof(Control, launched_ns),
      offsetof(Control, synced_ns), offsetof(Control, own_kernel_share), offsetof(Control, cuda_error),
      offsetof(Control, cuda_error_text), offsetof(Control, launched), offsetof(Control, hold),
      offsetof(Control, hold_ready), sizeof(LoadRequest), offsetof(LoadRequest, so_path),
      offsetof(LoadRequest, cuda_device), offsetof(LoadRequest, device_arena_handle), offsetof(LoadRequest, tensors),
      sizeof(TensorDesc), sizeof(LoadReply)};
  const int count = static_cast<int>(sizeof values / sizeof values[0]);
  for (int i = 0; i < count && i < n; ++i) out[i] = values[i];
  return count;
}

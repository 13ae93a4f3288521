#include "seccomp_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <iterator>
#include <vector>

namespace crucible::eval {
namespace {

using Program = std::vector<sock_filter>;

constexpr uint32_t kNr = offsetof(seccomp_data, nr);
constexpr uint32_t kArch = offsetof(seccomp_data, arch);
constexpr uint32_t arg_low(int i) { return offsetof(seccomp_data, args) + 8 * i; }

void stmt(Program& p, uint16_t code, uint32_t k) { p.push_back(BPF_STMT(code, k)); }
void jump(Program& p, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { p.push_back(BPF_JUMP(code, k, jt, jf)); }

void check_arch(Program& p) {
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kArch);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
}

constexpr uint32_t kRefuse = SECCOMP_RET_TRAP;

// If nr == syscall: when (arg & mask) != 0 refuse, else allow. Leaves the accumulator reloaded with nr.
void kill_if_flags(Program& p, long syscall, int arg, uint32_t mask) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(syscall), 0, 4);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, arg_low(arg));
  jump(p, BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1);
  stmt(p, BPF_RET | BPF_K, kRefuse);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

bool install(Program& p) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  sock_fprog prog{static_cast<unsigned short>(p.size()), p.data()};
  // TSYNC: a GPU driver's threads exist already, and a candidate that can write their memory could make them
  // do what its own thread may not.
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
}

}  // namespace

// Both stages are allowlists: any system call not named here (x32 numbers included) is refused.
namespace {
void allow_if_arg_equals(Program& p, long syscall, int arg, uint32_t value) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(syscall), 0, 4);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, arg_low(arg));
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0);
  stmt(p, BPF_RET | BPF_K, kRefuse);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

void allow(Program& p, long nr) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

// ioctl only on the given descriptors (elsewhere trapped, or ENOTTY); none given and no ENOTTY: no ioctl rule.
void allow_ioctl_on(Program& p, const std::vector<int>& fds, bool elsewhere_enotty) {
  if (fds.empty() && !elsewhere_enotty) return;
  const auto n = static_cast<uint8_t>(fds.size());
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(SYS_ioctl), 0, static_cast<uint8_t>(n + 3));
  stmt(p, BPF_LD | BPF_W | BPF_ABS, arg_low(0));
  for (uint8_t i = 0; i < n; ++i)
    jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(fds[i]), static_cast<uint8_t>(n - i), 0);
  stmt(p, BPF_RET | BPF_K, elsewhere_enotty ? SECCOMP_RET_ERRNO | ENOTTY : kRefuse);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

void fail_softly(Program& p, const SoftRefusals& soft) {
  for (const auto& [nr, error] : soft.fail_with_errno) {
    jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & SECCOMP_RET_DATA));
  }
}

// What an uncaught exception needs to end as a crash rather than a forbidden call: std::terminate writes its message
// to stderr (which is /dev/null), and abort() resets SIGABRT to its default before raising it again. Both stages
// need these rules: filters stack, and the strictest verdict of all installed filters applies.
void allow_abort_path(Program& p) {
  allow_if_arg_equals(p, SYS_write, 0, STDERR_FILENO);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  allow_if_arg_equals(p, SYS_rt_sigaction, 0, SIGABRT);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
}

void allow_device_needs(Program& p, const std::vector<long>& extra, const std::vector<int>& ioctl_fds,
                        const SoftRefusals& soft) {
  allow_ioctl_on(p, ioctl_fds, soft.ioctl_elsewhere_enotty);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  for (long nr : extra) allow(p, nr);
  fail_softly(p, soft);
}

// madvise, except the advice that frees or evicts a shared mapping's pages for every process that maps it: a worker
// that punches holes in the arena's next output makes the evaluator's untimed writes fault (and slows them).
void allow_madvise_but_shared_eviction(Program& p) {
  const uint32_t refused[] = {MADV_REMOVE, MADV_COLD, MADV_PAGEOUT, MADV_HWPOISON, 101 /* MADV_SOFT_OFFLINE */};
  const auto n = static_cast<uint8_t>(std::size(refused));
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(SYS_madvise), 0, static_cast<uint8_t>(n + 3));
  stmt(p, BPF_LD | BPF_W | BPF_ABS, arg_low(2));
  for (uint8_t i = 0; i < n; ++i) jump(p, BPF_JMP | BPF_JEQ | BPF_K, refused[i], static_cast<uint8_t>(n - i), 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, kRefuse);
}

// Shared by both stages: memory management, futex, exit, and the signals a crash or abort() needs.
void allow_basics(Program& p, pid_t self) {
  allow_if_arg_equals(p, SYS_tgkill, 0, static_cast<uint32_t>(self));  // abort() raises SIGABRT on itself
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  allow_madvise_but_shared_eviction(p);
  for (long nr : {SYS_futex, SYS_mmap, SYS_munmap, SYS_mremap, SYS_brk, SYS_mprotect, SYS_exit,
                  SYS_exit_group, SYS_rt_sigreturn, SYS_rt_sigprocmask, SYS_getpid, SYS_gettid, SYS_getppid,
                  SYS_restart_syscall})
    allow(p, nr);
}

// What dlopen and the worker's own reply need: read-only opens, reads, file status, one send on the socket.
void allow_loading(Program& p, int socket_fd, pid_t self) {
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  const uint32_t write_flags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;
  kill_if_flags(p, SYS_open, 1, write_flags);
  kill_if_flags(p, SYS_openat, 2, write_flags);
  allow_if_arg_equals(p, SYS_sendto, 0, static_cast<uint32_t>(socket_fd));
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  allow_basics(p, self);
  for (long nr : {SYS_read, SYS_pread64, SYS_close, SYS_fstat, SYS_newfstatat, SYS_statx, SYS_lseek, SYS_getrandom,
                  SYS_clock_gettime})
    allow(p, nr);
}

}  // namespace

bool install_load_stage_filter(int socket_fd, const std::vector<long>& extra, const std::vector<int>& ioctl_fds,
                               const SoftRefusals& soft) {
  Program p;
  check_arch(p);
  allow_loading(p, socket_fd, getpid());
  allow(p, SYS_prctl);  // the run stage's own filter is installed from here
  allow(p, SYS_seccomp);
  // The device's needs come before the abort path, whose write and rt_sigaction rules refuse other arguments: a
  // device that needs write on any descriptor (the CUDA driver reports faults that way) must match first.
  allow_device_needs(p, extra, ioctl_fds, soft);
  allow_abort_path(p);
  stmt(p, BPF_RET | BPF_K, kRefuse);
  return install(p);
}

bool install_run_stage_filter(pid_t self, const std::vector<long>& extra, const std::vector<int>& ioctl_fds,
                              const SoftRefusals& soft) {
  Program p;
  check_arch(p);
  stmt(p, BPF_LD | BPF_W | BPF_ABS, kNr);
  allow_basics(p, self);
  allow_device_needs(p, extra, ioctl_fds, soft);  // before the abort path, as above
  allow_abort_path(p);
  stmt(p, BPF_RET | BPF_K, kRefuse);
  return install(p);
}

bool install_reuse_stage_filter(int socket_fd, pid_t self, const std::vector<long>& extra,
                                const std::vector<int>& ioctl_fds) {
  Program p;
  check_arch(p);
  // What loading the next candidate needs (as in the load stage), without prctl and seccomp: a candidate cannot
  // change the process's own settings, or stack a filter, for the next one.
  allow_loading(p, socket_fd, self);
  allow_device_needs(p, extra, ioctl_fds, {});  // before the abort path, as above
  allow_abort_path(p);
  stmt(p, BPF_RET | BPF_K, kRefuse);
  return install(p);
}

}  // namespace crucible::eval

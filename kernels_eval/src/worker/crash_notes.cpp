#include "crash_notes.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

namespace crucible::eval::worker {
namespace {

protocol::Control* g_control = nullptr;

// The sandbox traps a forbidden system call instead of killing outright, so that the parent learns which one:
// note it, then die of SIGSYS (the handler was reset to the default on entry).
void on_forbidden_syscall(int sig, siginfo_t* info, void*) {
  if (g_control) {
    g_control->crash_code = info->si_syscall;
    g_control->crash_origin = info->si_code;  // SYS_SECCOMP when the sandbox refused a call; <= 0 when sent
    g_control->crash_address = 0;
    g_control->crash_signal.store(sig, std::memory_order_release);
  }
  syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGSYS);
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  // SA_RESETHAND restored the default action: returning re-runs the faulting instruction (or abort()
  // re-raises), and the process dies with the original signal after we leave a note for the parent.
  if (g_control) {
    g_control->crash_code = info->si_code;
    g_control->crash_origin = info->si_code;
    g_control->crash_address = reinterpret_cast<uint64_t>(info->si_addr);
    g_control->crash_signal.store(sig, std::memory_order_release);
  }
}

}  // namespace

void install_crash_notes(protocol::Control* control) {
  g_control = control;
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);  // stack overflows still get their note written
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) sigaction(sig, &sa, nullptr);
  sa.sa_sigaction = on_forbidden_syscall;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
  sigaction(SIGSYS, &sa, nullptr);
}

}  // namespace crucible::eval::worker

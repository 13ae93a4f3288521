#include "crucible/eval/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

namespace crucible::eval {
namespace {
using Clock = std::chrono::steady_clock;

void set_limit(int resource, std::size_t bytes) {
  if (bytes == 0) return;
  rlimit rl{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
  setrlimit(resource, &rl);
}
}  // namespace

namespace {

// This process's pausable children (process groups), and how long each has been stopped.
struct PausableGroup {
  Clock::time_point stopped_at{};
  double stopped_s = 0;
};
struct PauseRegistry {
  std::mutex mutex;
  std::map<pid_t, PausableGroup> groups;
  int pauses = 0;
};
PauseRegistry& pause_registry() {
  static PauseRegistry registry;
  return registry;
}

void stop_group(pid_t group, PausableGroup& g) {
  g.stopped_at = Clock::now();
  kill(-group, SIGSTOP);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void continue_group(pid_t group, PausableGroup& g) {
  g.stopped_s += seconds_since(g.stopped_at);
  kill(-group, SIGCONT);
}

void add_pausable(pid_t group) {
  auto& r = pause_registry();
  std::lock_guard lock(r.mutex);
  auto& g = r.groups[group];
  if (r.pauses > 0) stop_group(group, g);
}

// Seconds the group has been stopped so far, the current stop included.
double stopped_seconds(pid_t group) {
  auto& r = pause_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.groups.find(group);
  if (it == r.groups.end()) return 0;
  double s = it->second.stopped_s;
  if (r.pauses > 0) s += seconds_since(it->second.stopped_at);
  return s;
}

void remove_pausable(pid_t group) {
  auto& r = pause_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.groups.find(group);
  if (it == r.groups.end()) return;
  if (r.pauses > 0) continue_group(group, it->second);
  r.groups.erase(it);
}

}  // namespace

ChildrenPaused::ChildrenPaused() {
  auto& r = pause_registry();
  std::lock_guard lock(r.mutex);
  if (r.pauses++ == 0)
    for (auto& [group, g] : r.groups) stop_group(group, g);
}

ChildrenPaused::~ChildrenPaused() {
  auto& r = pause_registry();
  std::lock_guard lock(r.mutex);
  if (--r.pauses == 0)
    for (auto& [group, g] : r.groups) continue_group(group, g);
}

namespace {

// What the child needs, prepared before fork: it may only make system calls between fork and exec.
struct ChildPlan {
  std::vector<char*> args, env;
  const ProcessLimits& limits;
  const std::string& working_dir;
  bool drop_root;
  int ruleset;
  int output_fd;
  pid_t parent;
};

// Descriptors 3 and up, but for the Landlock ruleset the program still needs.
void close_inherited(int keep) {
  if (keep < 3) {
    syscall(SYS_close_range, 3U, ~0U, 0U);
    return;
  }
  if (keep > 3) syscall(SYS_close_range, 3U, static_cast<unsigned>(keep - 1), 0U);
  syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0U, 0U);
}

void kill_own_group(int) { kill(0, SIGKILL); }

void default_action_for(int signal_number) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(signal_number, &default_action, nullptr);
}

// The child stays as the group's supervisor and returns only in a forked program process. A parent-death signal
// reaches only the direct child, so the supervisor turns it into SIGKILL for its whole group: a compiler driver's own
// children (cc1plus, ptxas) go with it when the evaluator is killed outright. It waits for the program and ends as
// the program ended. Everything here is async-signal-safe (the parent may have threads).
void supervise(pid_t parent, int keep_fd) {
  struct sigaction on_parent_death {};
  on_parent_death.sa_handler = kill_own_group;
  sigaction(SIGTERM, &on_parent_death, nullptr);
  // Set after the identity change, which clears it.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) kill_own_group(0);
  close_inherited(keep_fd);  // the supervisor never execs: other children's pipes must not stay open here
  const pid_t supervisor = getpid();
  const pid_t program = fork();
  if (program < 0) _exit(ProcessResult::kCannotExecute);
  if (program == 0) {
    default_action_for(SIGTERM);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor) _exit(125);
    return;
  }
  int status = 0;
  while (waitpid(program, &status, 0) < 0) {
    if (errno != EINTR) _exit(ProcessResult::kCannotExecute);
  }
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  const int signal_number = WTERMSIG(status);
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // the supervisor is a copy of the evaluator: never dump it
  default_action_for(signal_number);
  kill(supervisor, signal_number);
  _exit(128 + signal_number);
}

[[noreturn]] void exec_child(const ChildPlan& c) {
  // Only async-signal-safe calls between fork and exec.
  setpgid(0, 0);
  dup2(c.output_fd, STDOUT_FILENO);
  dup2(c.output_fd, STDERR_FILENO);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  if (c.drop_root) {
    const gid_t id = kUnprivilegedId;
    if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0)
      _exit(ProcessResult::kCannotSetIdentity);
  }
  // The child is in its own process group, so a signal to ours never reaches it: it dies with us instead
  // (the calling thread waits for it, so the signal comes only when the process goes).
  supervise(c.parent, c.ruleset);
  set_limit(RLIMIT_AS, c.limits.address_space_bytes);
  set_limit(RLIMIT_FSIZE, c.limits.file_size_bytes);
  if (c.limits.nice > 0) setpriority(PRIO_PROCESS, 0, c.limits.nice);
  if (!c.working_dir.empty() && chdir(c.working_dir.c_str()) != 0) _exit(ProcessResult::kCannotEnterDirectory);
  if (c.ruleset >= 0 && c.limits.files->own_proc && !allow_own_proc(c.ruleset)) _exit(ProcessResult::kCannotConfine);
  if (c.ruleset >= 0 && !enter_file_rules(c.ruleset)) _exit(ProcessResult::kCannotConfine);
  // Descriptors the caller left open without close-on-exec would stay readable whatever Landlock says.
  syscall(SYS_close_range, 3U, ~0U, 0U);
  if (c.limits.environment.empty())
    execvp(c.args[0], c.args.data());
  else
    execvpe(c.args[0], c.args.data(), c.env.data());
  _exit(ProcessResult::kCannotExecute);
}

// The child's output until it closes its end or the deadline passes; then its end, and its group's.
void collect(pid_t pid, int output_fd, const ProcessLimits& limits, Clock::time_point start, ProcessResult& result) {
  char buffer[8192];
  bool open_pipe = true;
  while (open_pipe) {
    const double stopped = limits.pausable ? stopped_seconds(pid) : 0;
    const auto deadline = start + std::chrono::duration<double>(limits.wall_seconds + stopped);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd pfd{output_fd, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = read(output_fd, buffer, sizeof buffer);
    if (n <= 0) {
      open_pipe = false;
    } else if (result.output.size() < limits.max_output_bytes) {
      result.output.append(buffer, std::min<std::size_t>(n, limits.max_output_bytes - result.output.size()));
    }
  }
  close(output_fd);
  if (limits.pausable) remove_pausable(pid);  // a stopped group would never be reaped
  if (result.timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!result.timed_out) kill(-pid, SIGKILL);  // stray grandchildren that kept no pipe open
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessLimits& limits,
                          const std::string& working_dir) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
  ChildPlan child{{}, {}, limits, working_dir, limits.unprivileged && geteuid() == 0, -1, -1, getpid()};
  for (const auto& a : argv) child.args.push_back(const_cast<char*>(a.c_str()));
  child.args.push_back(nullptr);
  for (const auto& e : limits.environment) child.env.push_back(const_cast<char*>(e.c_str()));
  child.env.push_back(nullptr);
  std::string landlock_error;
  child.ruleset = limits.files ? build_file_rules(*limits.files, landlock_error) : -1;
  if (limits.files && child.ruleset < 0 && landlock_abi() > 0) {  // fail closed: never run unconfined where it could be
    ProcessResult refused;
    refused.exit_code = ProcessResult::kCannotConfine;
    refused.output = landlock_error;
    return refused;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    if (child.ruleset >= 0) close(child.ruleset);
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  child.output_fd = pipe_fds[1];
  const auto start = Clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (child.ruleset >= 0) close(child.ruleset);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) exec_child(child);
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  if (limits.pausable) add_pausable(pid);
  close(pipe_fds[1]);
  if (child.ruleset >= 0) close(child.ruleset);
  ProcessResult result;
  result.confined = child.ruleset >= 0;
  collect(pid, pipe_fds[0], limits, start, result);
  return result;
}

}  // namespace crucible::eval

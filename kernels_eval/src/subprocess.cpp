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

[[noreturn]] void exec_child(const ChildPlan& c) {
  // Only async-signal-safe calls between fork and exec.
  setpgid(0, 0);
  // The child is in its own process group, so a signal to ours never reaches it: it dies with us instead
  // (the calling thread waits for it, so the signal comes only when the process goes).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != c.parent) _exit(125);
  dup2(c.output_fd, STDOUT_FILENO);
  dup2(c.output_fd, STDERR_FILENO);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  set_limit(RLIMIT_AS, c.limits.address_space_bytes);
  set_limit(RLIMIT_FSIZE, c.limits.file_size_bytes);
  if (c.limits.nice > 0) setpriority(PRIO_PROCESS, 0, c.limits.nice);
  if (c.drop_root) {
    const gid_t id = kUnprivilegedId;
    if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0)
      _exit(ProcessResult::kCannotSetIdentity);
  }
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
  auto deadline = start + std::chrono::duration<double>(limits.wall_seconds);
  char buffer[8192];
  bool open_pipe = true;
  while (open_pipe) {
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
  close(pipe_fds[1]);
  if (child.ruleset >= 0) close(child.ruleset);
  ProcessResult result;
  result.confined = child.ruleset >= 0;
  collect(pid, pipe_fds[0], limits, start, result);
  return result;
}

}  // namespace crucible::eval

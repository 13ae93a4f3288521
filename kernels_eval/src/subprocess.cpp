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

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessLimits& limits,
                          const std::string& working_dir) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
  std::vector<char*> args, env;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : limits.environment) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  const bool drop_root = limits.unprivileged && geteuid() == 0;
  // Built here: the child may only make system calls between fork and exec.
  std::string landlock_error;
  const int ruleset = limits.files ? build_file_rules(*limits.files, landlock_error) : -1;
  if (limits.files && ruleset < 0 && landlock_abi() > 0) {  // fail closed: never run unconfined where it could be
    ProcessResult refused;
    refused.exit_code = ProcessResult::kCannotConfine;
    refused.output = landlock_error;
    return refused;
  }

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    if (ruleset >= 0) close(ruleset);
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  auto start = Clock::now();
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (ruleset >= 0) close(ruleset);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    setpgid(0, 0);
    // The child is in its own process group, so a signal to ours never reaches it: it dies with us instead
    // (the calling thread waits for it, so the signal comes only when the process goes).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    set_limit(RLIMIT_AS, limits.address_space_bytes);
    set_limit(RLIMIT_FSIZE, limits.file_size_bytes);
    if (limits.nice > 0) setpriority(PRIO_PROCESS, 0, limits.nice);
    if (drop_root) {
      const gid_t id = kUnprivilegedId;
      if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0)
        _exit(ProcessResult::kCannotSetIdentity);
    }
    if (!working_dir.empty() && chdir(working_dir.c_str()) != 0) _exit(ProcessResult::kCannotEnterDirectory);
    if (ruleset >= 0 && limits.files->own_proc && !allow_own_proc(ruleset)) _exit(ProcessResult::kCannotConfine);
    if (ruleset >= 0 && !enter_file_rules(ruleset)) _exit(ProcessResult::kCannotConfine);
    // Descriptors the caller left open without close-on-exec would stay readable whatever Landlock says.
    syscall(SYS_close_range, 3U, ~0U, 0U);
    if (limits.environment.empty())
      execvp(args[0], args.data());
    else
      execvpe(args[0], args.data(), env.data());
    _exit(ProcessResult::kCannotExecute);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  close(pipe_fds[1]);
  if (ruleset >= 0) close(ruleset);

  ProcessResult result;
  result.confined = ruleset >= 0;
  auto deadline = start + std::chrono::duration<double>(limits.wall_seconds);
  char buffer[8192];
  bool open_pipe = true;
  while (open_pipe) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
    if (n <= 0) {
      open_pipe = false;
    } else if (result.output.size() < limits.max_output_bytes) {
      result.output.append(buffer, std::min<std::size_t>(n, limits.max_output_bytes - result.output.size()));
    }
  }
  close(pipe_fds[0]);
  if (result.timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!result.timed_out) kill(-pid, SIGKILL);  // stray grandchildren that kept no pipe open
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace crucible::eval

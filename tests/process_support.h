#pragma once
// Runs `crucible` commands as background processes (a coordinator and its evaluator nodes), so a test can stop,
// kill or freeze one of them while the others go on.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace crucible::test {

// A child process whose output goes to a file. Killed (-9) when the object goes away while it still runs.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::filesystem::path& output) : output_(output) {
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!exit_code_) {
      ::kill(pid_, SIGKILL);
      wait_for(std::chrono::seconds(10));
    }
  }

  void signal(int sig) const { ::kill(pid_, sig); }
  // The exit code (128 + signal for a killed process), or nothing if it still runs after `limit`.
  std::optional<int> wait_for(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!exit_code_) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }
  std::string output() const {
    std::ifstream in(output_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  pid_t pid_ = -1;
  std::filesystem::path output_;
  std::optional<int> exit_code_;
};

// Polls `condition` until it holds or `limit` passes; returns whether it held.
inline bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit,
                       std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(every);
  }
  return condition();
}

// A TCP port nothing listens on right now (the kernel's choice for port 0).
inline uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace crucible::test

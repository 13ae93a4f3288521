#include "run/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace crucible::run {
namespace {

pid_t read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? static_cast<pid_t>(std::strtol(buf, nullptr, 10)) : 0;
}

}  // namespace

RunLock RunLock::take(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto file = dir / "run.lock";
  // Close-on-exec: compilers and workers must not inherit the lock and keep it after the run has died.
  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RunError("cannot open " + file.string() + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const pid_t holder = err == EWOULDBLOCK ? read_pid(fd) : 0;
    close(fd);
    if (err != EWOULDBLOCK) throw RunError("cannot lock " + file.string() + ": " + std::strerror(err));
    throw RunBusy(dir.string() + " is in use by another crucible process" +
                      (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                      "; one run or resume at a time",
                  holder);
  }
  // One write of a fixed width, no truncation first: a process refused meanwhile never reads an empty file.
  char pid[24];
  std::snprintf(pid, sizeof pid, "%-22d\n", static_cast<int>(getpid()));
  if (pwrite(fd, pid, 23, 0) != 23 || ftruncate(fd, 23) != 0) {
    close(fd);
    throw RunError("cannot write " + file.string() + ": " + std::strerror(errno));
  }
  return RunLock(fd);
}

bool RunLock::held(const std::filesystem::path& dir) {
  const int fd = open((dir / "run.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // A shared probe: it fails only while someone holds the exclusive lock.
  const bool busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // releases the probe
  return busy;
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace crucible::run

#pragma once
// One process at a time per run directory. A second `crucible run --resume` of the same directory would append
// the same units twice to the journal and the candidate records; an advisory lock (flock) on DIR/run.lock keeps
// it out. The kernel drops the lock when the holder dies, even by kill -9, so a crashed run never stays locked.
#include <sys/types.h>

#include <filesystem>

#include "run/run_error.h"

namespace crucible::run {

// The directory is held by another live process.
class RunBusy : public RunError {
 public:
  RunBusy(const std::string& what, pid_t holder) : RunError(what), holder_(holder) {}
  pid_t holder() const { return holder_; }  // 0 when the holder's pid could not be read

 private:
  pid_t holder_;
};

class RunLock {
 public:
  // Creates `dir` if needed and takes its lock, writing this process's pid into the lock file. Throws RunBusy when
  // another process holds it, RunError when the file cannot be made.
  static RunLock take(const std::filesystem::path& dir);
  // Whether a live process holds the directory's lock (a run going on), without taking it for longer than a
  // probe; false where there is no lock file.
  static bool held(const std::filesystem::path& dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace crucible::run

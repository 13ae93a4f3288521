#pragma once
// Runs a program with resource limits and a wall-clock limit, capturing its merged output.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/landlock.h"

namespace crucible::eval {

struct ProcessLimits {
  double wall_seconds = 30.0;
  std::size_t address_space_bytes = 0;  // 0: unlimited
  std::size_t file_size_bytes = 0;      // 0: unlimited
  std::size_t max_output_bytes = 64 * 1024;
  int nice = 0;  // added to the child's scheduling niceness
  // Stopped while a ChildrenPaused lives in this process (SIGSTOP to its process group), the time stopped not counted
  // against wall_seconds: work such as compiles yields to this process's own timing, but not to anyone else's load.
  bool pausable = false;
  // Started as root, the child gives up root for the unprivileged uid and gid 65534 ("nobody") before it runs:
  // owner permissions would otherwise let a compiler read root's private files into its error messages.
  bool unprivileged = false;
  // The child's whole environment when not empty (the caller's is not inherited then).
  std::vector<std::string> environment;
  // Files the child (and all it starts) may reach, enforced by Landlock where the kernel has it; elsewhere the child
  // runs without (ProcessResult::confined says which).
  std::optional<FileRules> files;
};

constexpr unsigned kUnprivilegedId = 65534;

struct ProcessResult {
  int exit_code = -1;   // valid when !signaled
  int signal = 0;       // the signal that ended it, 0 if it exited
  bool timed_out = false;
  double seconds = 0.0;
  std::string output;   // stdout and stderr, truncated to max_output_bytes
  bool confined = false;  // ProcessLimits::files was enforced
  bool ok() const { return !timed_out && signal == 0 && exit_code == 0; }
  // Exit codes of the child itself before the program ran (see run_process).
  static constexpr int kCannotConfine = 123, kCannotSetIdentity = 124, kCannotEnterDirectory = 126, kCannotExecute = 127;
};

// While one lives, this process's pausable children are stopped, those started meanwhile too; pauses from several
// threads stack, and the children continue when the last one ends.
class ChildrenPaused {
 public:
  ChildrenPaused();
  ~ChildrenPaused();
  ChildrenPaused(const ChildrenPaused&) = delete;
  ChildrenPaused& operator=(const ChildrenPaused&) = delete;
};

// The child runs in its own process group, so a timeout kills the whole tree it started; when this process dies,
// the child's supervisor kills that group too.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessLimits& limits,
                          const std::string& working_dir = {});

}  // namespace crucible::eval

#pragma once
// Filesystem confinement with Landlock (Linux 5.13+): a process restricts itself, and everything it starts, to the
// files and directories in a rule set. Used for the compiler (its toolchain, its build directory) and the CPU
// worker (the candidate's library and the files already mapped). Unprivileged: no root, no namespaces.
#include <string>
#include <vector>

namespace crucible::eval {

// The kernel's Landlock ABI version; 0 where Landlock is missing or turned off (the callers then run without it,
// and docs/evaluation.md says what is relied on instead).
int landlock_abi();

struct FileRules {
  std::vector<std::string> read_only;   // read and execute: files or whole directory trees
  std::vector<std::string> read_write;  // also create, write, remove: directory trees or single files (/dev/null)
  // The confined process's own /proc/self, readable, with its threads' files also writable: the CUDA driver reads
  // its maps and status and names its threads (/proc/self/task/<tid>/comm); cuInit fails if it cannot. Added by the
  // child itself (allow_own_proc), since the rule set is built before the child exists.
  bool own_proc = false;
};

// The system's programs and libraries, read-only for every confined tool: /usr, /bin, /sbin, the /lib trees, the
// linker's cache, /etc/alternatives and /dev/urandom.
std::vector<std::string> system_files();

// What a process that talks to the GPU driver reaches beyond the system's files: what the driver reads about the
// machine (/sys, /proc/driver/nvidia and a few /proc files that are not any process's), read-only; the GPU's device
// files and /dev/null, read and write. (Its own /proc/self is `own_proc`.)
void allow_gpu_driver(FileRules& rules);

// A rule set as a descriptor (close-on-exec), ready for landlock_restrict_self. Paths that do not exist are left
// out. Returns -1 with `error` set where Landlock is missing or a rule cannot be added. Builds everything that
// allocates, so a child between fork and exec only needs enter_file_rules.
int build_file_rules(const FileRules& rules, std::string& error);

// Adds the calling process's /proc/self (read) and /proc/self/task (read and write) to a rule set. Only system
// calls: safe between fork and exec, in a child whose rule set is its own.
bool allow_own_proc(int ruleset_fd);

// Restricts the calling thread (and what it execs or starts later) to the rule set: no-new-privileges, then
// landlock_restrict_self. Only system calls: safe between fork and exec.
bool enter_file_rules(int ruleset_fd);

}  // namespace crucible::eval

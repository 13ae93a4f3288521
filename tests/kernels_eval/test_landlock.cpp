// Landlock rule sets as the evaluator builds them for its children: what a confined process may read and write of
// /proc. A shell's builtins open files from the shell's own process, so /proc/$$ is the confined process itself.
#include <doctest/doctest.h>

#include <string>

#include "crucible/eval/landlock.h"
#include "crucible/eval/subprocess.h"

using namespace crucible;

namespace {

struct ProcCase {
  const char* what;
  bool own_proc;
  const char* command;  // prints "yes" when the access succeeded
  bool allowed;
};

const ProcCase kProcCases[] = {
    {"own status, with own_proc", true, "read l < /proc/$$/status && echo yes", true},
    {"own thread name written, with own_proc", true, "echo probe > /proc/$$/task/$$/comm && echo yes", true},
    {"another process's status, with own_proc", true, "read l < /proc/1/status && echo yes", false},
    {"another process's environment, with own_proc", true, "read l < /proc/1/environ && echo yes", false},
    {"own status, without own_proc", false, "read l < /proc/$$/status && echo yes", false},
    {"own thread name, without own_proc", false, "echo probe > /proc/$$/task/$$/comm && echo yes", false},
};

}  // namespace

TEST_CASE("a confined child reaches its own /proc entries only when asked, and never another process's") {
  if (eval::landlock_abi() == 0) {
    MESSAGE("skipped: this kernel has no Landlock (docs/evaluation.md)");
    return;
  }
  for (const auto& c : kProcCases) {
    eval::ProcessLimits limits;
    limits.wall_seconds = 10.0;
    eval::FileRules rules;
    rules.read_only = eval::system_files();
    rules.read_write = {"/dev/null"};
    rules.own_proc = c.own_proc;
    limits.files = rules;
    auto r = eval::run_process({"/bin/sh", "-c", c.command}, limits);
    INFO(c.what, ": ", r.output);
    CHECK(r.confined);
    CHECK((r.output.find("yes") != std::string::npos) == c.allowed);
  }
}

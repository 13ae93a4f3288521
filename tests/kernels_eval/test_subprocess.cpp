// run_process: the wall-clock limit, the child's whole process group dying with this process, and pausable children.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "crucible/eval/subprocess.h"
#include "support.h"

using namespace crucible;
using namespace std::chrono_literals;

namespace {

// The pid a child wrote to the file, once it is there (0 after the deadline).
pid_t read_pid(const std::filesystem::path& file, std::chrono::seconds wait = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    long pid = 0;
    if (in >> pid && pid > 0) return static_cast<pid_t>(pid);
    std::this_thread::sleep_for(20ms);
  }
  return 0;
}

// 'R', 'S', 'T' (stopped), 'Z' (a zombie: dead, not yet reaped), or 0 when the process is gone.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? 0 : line[paren + 2];
}

bool gone_within(pid_t pid, std::chrono::seconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    const char state = process_state(pid);
    if (state == 0 || state == 'Z') return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace

TEST_CASE("run_process enforces its wall-clock limit on the whole process group") {
  eval::ProcessLimits limits;
  limits.wall_seconds = 0.5;
  auto r = eval::run_process({"sh", "-c", "sleep 30 & sleep 30"}, limits);
  CHECK(r.timed_out);
  CHECK(r.seconds < 5.0);
  auto ok = eval::run_process({"sh", "-c", "echo hello; exit 3"}, {});
  CHECK_FALSE(ok.timed_out);
  CHECK(ok.exit_code == 3);
  CHECK(ok.output == "hello\n");
  auto killed = eval::run_process({"sh", "-c", "kill -TERM $$"}, {});
  CHECK(killed.signal == SIGTERM);
}

TEST_CASE("a child's own children die with the process that started it, killed outright") {
  // A compiler driver's cc1plus is such a grandchild: the process that ran run_process is killed with SIGKILL.
  test::ScratchDir dir("subprocess-orphans");
  const auto pid_file = dir.path() / "grandchild";
  const pid_t evaluator = fork();
  REQUIRE(evaluator >= 0);
  if (evaluator == 0) {
    eval::ProcessLimits limits;
    limits.wall_seconds = 120;
    eval::run_process({"sh", "-c", "sleep 300 & echo $! > '" + pid_file.string() + "'; wait"}, limits);
    _exit(0);
  }
  const pid_t grandchild = read_pid(pid_file);
  kill(evaluator, SIGKILL);
  waitpid(evaluator, nullptr, 0);
  REQUIRE(grandchild > 0);
  CHECK(gone_within(grandchild, 10s));
  if (!gone_within(grandchild, 0s)) kill(grandchild, SIGKILL);
}

TEST_CASE("a pausable child stops while this process times, and its stopped time is not counted against its limit") {
  test::ScratchDir dir("subprocess-pause");
  const auto pid_file = dir.path() / "child";
  eval::ProcessLimits limits;
  limits.pausable = true;
  // Ten 0.1 s sleeps take about 1 s (2 s on a loaded machine); with a 4 s pause only the credit lets them finish.
  limits.wall_seconds = 3.0;
  eval::ProcessResult result;
  std::thread runner([&] {
    result = eval::run_process(
        {"sh", "-c", "echo $$ > '" + pid_file.string() + "'; i=0; while [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); done"},
        limits);
  });
  const pid_t child = read_pid(pid_file);
  CHECK(child > 0);
  {
    eval::ChildrenPaused paused;
    std::this_thread::sleep_for(500ms);
    CHECK(process_state(child) == 'T');
    std::this_thread::sleep_for(3500ms);
  }
  runner.join();
  INFO(result.output);
  CHECK(result.ok());
  CHECK(result.seconds > 4.0);
}

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/task_spec.h"
#include "worker_process.h"
#include "support.h"

using namespace crucible;

TEST_CASE("the arena lays sets out aligned and without overlap") {
  std::vector<eval::TensorShape> in{{eval::DType::float32, {3, 5}}, {eval::DType::int64, {7}}};
  std::vector<eval::TensorShape> out{{eval::DType::float32, {}}};
  auto layout = eval::plan_arena(in, out, 3);
  REQUIRE(layout.sets() == 3);
  std::size_t end = 4096;
  for (int s = 0; s < 3; ++s)
    for (const auto* group : {&layout.inputs[s], &layout.outputs[s]})
      for (const auto& t : *group) {
        CHECK(t.offset % 256 == 0);
        CHECK(t.offset >= end);
        end = t.offset + t.bytes;
      }
  CHECK(layout.inputs[0][0].strides == std::vector<int64_t>{5, 1});
  CHECK(layout.outputs[0][0].bytes == 4);  // a 0-d tensor holds one element
  CHECK(layout.bytes % 4096 == 0);
  CHECK(layout.bytes >= end);
  CHECK_THROWS(eval::plan_arena(in, out, 0));
}

TEST_CASE("the pool keeps workers warm and replaces one that died while idle") {
  eval::WorkerPool pool(eval::default_worker_binary(), 2);
  CHECK(pool.started() == 2);
  auto a = pool.acquire();
  REQUIRE(a);
  CHECK(pool.started() == 3);
  CHECK(std::filesystem::is_directory(a->scratch_dir()));  // each worker has a private temporary directory
  auto a_scratch = a->scratch_dir();
  kill(a->pid(), SIGKILL);  // a worker lost before any job is simply not used
  auto b = pool.acquire();
  auto c = pool.acquire();
  CHECK(b->pid() != c->pid());
  CHECK(b->scratch_dir() != c->scratch_dir());
  CHECK(pool.started() == 5);
  a.reset();
  CHECK_FALSE(std::filesystem::exists(a_scratch));  // removed with its worker
}

TEST_CASE("a worker loads a candidate, runs calls on any set, and reports a crash as a crash") {
  test::ScratchDir cache("worker");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  const char* source = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  float v = *(const float*)in[0].data;
  if (v < 0) { volatile int* p = 0; *p = 1; }
  *(float*)out[0].data = 2 * v;
  return v == 7 ? 7 : 0;
})";
  auto built = compiler.compile(source, {});
  REQUIRE(built.ok());
  auto layout = eval::plan_arena({{eval::DType::float32, {1}}}, {{eval::DType::float32, {1}}}, 2);
  eval::WorkerPool pool(eval::default_worker_binary(), 1);
  auto w = pool.acquire();
  eval::SharedArena arena;
  arena.reserve(layout.bytes);
  REQUIRE(w->load(built.so_path, layout, arena, {}, 5.0).ok());
  auto* in1 = reinterpret_cast<float*>(w->arena() + layout.inputs[1][0].offset);
  auto* out1 = reinterpret_cast<float*>(w->arena() + layout.outputs[1][0].offset);
  *in1 = 3.0f;
  auto r = w->call(1, 5.0);
  CHECK(r.ok());
  CHECK(*out1 == 6.0f);
  CHECK(w->sync(5.0).ok());
  *in1 = 7.0f;
  auto failed = w->call(1, 5.0);
  CHECK(failed.kind == eval::CallOutcome::Kind::candidate_error);
  CHECK(failed.rc == 7);
  *in1 = -1.0f;
  auto crashed = w->call(1, 5.0);
  CHECK(crashed.kind == eval::CallOutcome::Kind::crashed);
  CHECK(crashed.detail.find("SIGSEGV") != std::string::npos);
  auto after = w->call(1, 5.0);
  CHECK(after.kind == eval::CallOutcome::Kind::worker_lost);
}

namespace {
char process_state(pid_t pid) {  // 'T' stopped, 'S' asleep...; 0 when gone
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? 0 : text[paren + 2];
}

// A signal is delivered when the process next runs: its state is looked at for up to a second.
// Bounds are generous: a loaded 2-core machine can take seconds to schedule a signalled process.
bool comes_to(pid_t pid, char state) {
  for (int i = 0; i < 1000; ++i) {
    if (process_state(pid) == state) return true;
    usleep(10000);
  }
  return false;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(text.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    if (fields >> state >> ppid && ppid == parent) found.push_back(std::stoi(name));
  }
  return found;
}

// A child process plays an evaluator: `start` runs in it and returns a pid it reports; then it waits to be killed.
struct ForkedEvaluator {
  pid_t pid = -1;
  int reported = 0;
};

template <typename Start>
ForkedEvaluator fork_evaluator(Start start) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  ForkedEvaluator e;
  e.pid = fork();
  REQUIRE(e.pid >= 0);
  if (e.pid == 0) {
    close(pipe_fds[0]);
    const int pid = start();
    if (write(pipe_fds[1], &pid, sizeof pid) != sizeof pid) _exit(1);
    pause();
    _exit(0);
  }
  close(pipe_fds[1]);
  REQUIRE(read(pipe_fds[0], &e.reported, sizeof e.reported) == sizeof e.reported);
  close(pipe_fds[0]);
  return e;
}

// Gone, or a zombie that init has not reaped yet, within five seconds (it is init's child once its parent died).
bool ends_soon(pid_t pid) {
  for (int i = 0; i < 600; ++i) {
    const char state = process_state(pid);
    if (state == 0 || state == 'Z') return true;
    usleep(50000);
  }
  return false;
}
}  // namespace

TEST_CASE("an evaluator killed outright leaves no worker and no directory behind for long") {
  // Its pool has one warm worker; the worker it took is reported, its replacement starts too.
  const auto evaluator = fork_evaluator([] {
    // Both kept (the child never returns from pause()), as a running evaluator keeps them.
    auto* pool = new eval::WorkerPool(eval::default_worker_binary(), 1);
    return static_cast<int>(pool->acquire().release()->pid());
  });
  const int worker_pid = evaluator.reported;
  const std::string own_dirs = "crucible-worker-" + std::to_string(evaluator.pid) + "-";
  auto count_dirs = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
      n += e.path().filename().string().rfind(own_dirs, 0) == 0;
    return n;
  };
  CHECK(count_dirs() >= 1);
  kill(evaluator.pid, SIGKILL);
  waitpid(evaluator.pid, nullptr, 0);
  // The worker sees its socket close (not loaded yet) and exits.
  CHECK(ends_soon(worker_pid));
  // The next evaluator removes what the killed one left (another evaluator starting on this machine at the same
  // time may be the one that removes it, so the count of this call is not asserted).
  eval::remove_orphaned_scratch_dirs("worker");
  CHECK(count_dirs() == 0);
}

// `sleep` plays a spare that is still starting: it never says hello.
TEST_CASE("spares still starting are stopped while starts are paused, and a worker acquire hands out never is") {
  const auto before = children_of(getpid());
  auto started_since = [&] {
    std::vector<pid_t> fresh;
    for (pid_t pid : children_of(getpid()))
      if (std::find(before.begin(), before.end(), pid) == before.end() && process_state(pid) != 'Z')
        fresh.push_back(pid);
    return fresh;
  };
  eval::WorkerPool pool("/bin/sleep", 2, {"60"}, 0.1);
  const auto spares = started_since();
  REQUIRE(spares.size() == 2);
  {
    eval::StartsPaused paused({&pool, nullptr});
    for (pid_t pid : spares) CHECK(comes_to(pid, 'T'));
    pool.pause_starts();  // nested: one resume is not enough to let them go
    pool.resume_starts();
    for (pid_t pid : spares) CHECK(comes_to(pid, 'T'));
    // Both spares are let go, wait 0.1 s for a hello that never comes and are dropped; acquire starts one itself,
    // and the two replacements start stopped.
    auto taken = pool.acquire();
    CHECK(process_state(taken->pid()) != 'T');
    int stopped = 0, others = 0;
    for (pid_t pid : started_since()) {
      CHECK(std::find(spares.begin(), spares.end(), pid) == spares.end());
      if (pid == taken->pid()) continue;
      ++others;
      stopped += comes_to(pid, 'T');
    }
    CHECK(others == 2);
    CHECK(stopped == 2);
  }
  for (pid_t pid : started_since()) CHECK(comes_to(pid, 'S'));
}

TEST_CASE("an evaluator killed while a spare is stopped leaves no process behind") {
  const auto evaluator = fork_evaluator([] {
    auto* pool = new eval::WorkerPool("/bin/sleep", 1, {"60"});  // kept: the child never returns from pause()
    pool->pause_starts();
    auto spares = children_of(getpid());
    return spares.empty() ? 0 : static_cast<int>(spares[0]);
  });
  const int spare = evaluator.reported;
  REQUIRE(spare > 0);
  CHECK(comes_to(spare, 'T'));
  kill(evaluator.pid, SIGKILL);
  waitpid(evaluator.pid, nullptr, 0);
  // Its process group is orphaned with a stopped member: the kernel sends SIGHUP and SIGCONT.
  CHECK(ends_soon(spare));
}

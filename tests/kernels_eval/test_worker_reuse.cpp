// Reusing a worker for several candidates (docs/cuda.md, "Reusing a worker"): the comparison of process images, and
// real CPU workers that serve a second candidate after a verified reset, or are ended when their candidate left
// something behind. (The CUDA worker's device checks are in the GPU suite, test_cuda_eval.cpp.)
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>

#include <optional>
#include <string>

#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "worker_image.h"
#include "worker_process.h"
#include "support.h"

using namespace crucible;

namespace {

const char* kBaselineSmaps =
    "55d0a0000000-55d0a0010000 r-xp 00001000 08:01 11 /opt/crucible-worker\n"
    "Anonymous:             0 kB\n"
    "55d0a0010000-55d0a0020000 rw-p 00011000 08:01 11 /opt/crucible-worker\n"
    "Anonymous:             8 kB\n"
    "55d0a1000000-55d0a1100000 rw-p 00000000 00:00 0 [heap]\n"
    "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
    "7f0000200000-7f0000300000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
    "Anonymous:             0 kB\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
const char* kBaselineStatus = "Threads:\t3\nSigIgn:\t0000000000001000\nSigCgt:\t0000000000004a02\n"
                              "SigBlk:\t0000000000000000\nSeccomp_filters:\t1\n";

eval::ProcessImage image(const std::string& smaps, const std::string& status = kBaselineStatus) {
  eval::ProcessImage i = eval::parse_smaps(smaps);
  eval::parse_status(status, i);
  return i;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

}  // namespace

TEST_CASE("a reset worker's process image is compared with its trusted setup's") {
  const eval::ProcessImage baseline = image(kBaselineSmaps);
  REQUIRE(baseline.mappings.size() == 6);
  CHECK(baseline.mappings[0].path == "/opt/crucible-worker");
  CHECK(baseline.mappings[1].anonymous_kb == 8);
  CHECK(baseline.threads == 3);
  eval::ImageAllowance allowance;
  allowance.added_filters = 1;
  const std::string filters2 = replaced(kBaselineStatus, "Seccomp_filters:\t1", "Seccomp_filters:\t2");
  struct Case {
    const char* name;
    std::string smaps, status;
    const char* expected;  // a part of the reason; "" for clean
  };
  const std::string base = kBaselineSmaps;
  const Case cases[] = {
      {"unchanged", base, filters2, ""},
      {"heap grown within the allowance", replaced(base, "55d0a1100000 rw-p", "55d0a2000000 rw-p"), filters2, ""},
      {"the driver mapped its device file", base + "7f0000400000-7f0000500000 rw-s 00000000 00:05 3 /dev/nvidia0\n",
       filters2, ""},
      {"a filter too few (the reuse stage's missing)", base, kBaselineStatus, "seccomp filters"},
      {"a thread left behind", base, replaced(filters2, "Threads:\t3", "Threads:\t4"), "threads"},
      {"a signal handler installed", base, replaced(filters2, "4a02", "4a06"), "signal"},
      {"new executable memory", base + "7f0000600000-7f0000601000 r-xp 00000000 00:00 0 \n", filters2, "executable"},
      {"writable and executable memory", base + "7f0000600000-7f0000601000 rwxp 00000000 00:00 0 \n", filters2,
       "writable and executable"},
      {"the candidate's library still mapped",
       base + "7f0000700000-7f0000710000 r--p 00000000 08:01 99 /tmp/worker-1/candidate-1.so\n", filters2,
       "file mapping"},
      {"code patched in place",
       replaced(base, "/usr/lib/libc.so.6\nAnonymous:             0 kB", "/usr/lib/libc.so.6\nAnonymous:             4 kB"),
       filters2, "written"},
      {"an unknown kernel area", base + "7f0000800000-7f0000801000 rw-p 00000000 00:00 0 [anon:stash]\n", filters2,
       "kernel area"},
      {"anonymous memory grown past the allowance", base + "7f1000000000-7f1040000000 rw-p 00000000 00:00 0 \n",
       filters2, "anonymous memory"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const std::string why = eval::compare_images(baseline, image(c.smaps, c.status), allowance);
    if (std::string(c.expected).empty()) CHECK(why.empty());
    else CHECK(why.find(c.expected) != std::string::npos);
  }
}

namespace {

// A candidate that writes `factor` times its input, with `extra` code run on each call.
std::string candidate(int factor, const std::string& extra = "", const std::string& top = "") {
  return "#include <crucible/kernel.h>\n" + top +
         "\nCRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, "
         "void*) {\n" +
         extra + "\n  *(float*)out[0].data = " + std::to_string(factor) + " * *(const float*)in[0].data;\n  return 0;\n}\n";
}

struct ReuseRig {
  test::ScratchDir cache{"reuse"};
  eval::Compiler compiler{cache.path(), eval::default_include_dir()};
  eval::ArenaLayout layout = eval::plan_arena({{eval::DType::float32, {1}}}, {{eval::DType::float32, {1}}}, 1);
  eval::SharedArena arena;
  eval::WorkerPool pool{eval::default_worker_binary(), 1};
  ReuseRig() {
    arena.reserve(layout.bytes);
    pool.set_reuse(4);
  }
  std::filesystem::path build(const std::string& source) {
    auto built = compiler.compile(source, {});
    REQUIRE(built.ok());
    return built.so_path;
  }
  // Loads and calls once on 3; the output.
  float run(eval::WorkerProcess& w, const std::filesystem::path& so) {
    const auto loaded = w.load(so, layout, arena, {}, 10.0);
    INFO(loaded.detail);
    REQUIRE(loaded.ok());
    *reinterpret_cast<float*>(w.arena() + layout.inputs[0][0].offset) = 3.0f;
    REQUIRE(w.call(0, 10.0).ok());
    return *reinterpret_cast<float*>(w.arena() + layout.outputs[0][0].offset);
  }
};

}  // namespace

namespace {
// The evaluator gives each candidate of a reused worker its own CPU limit from outside (prlimit), which needs the
// worker's user or CAP_SYS_RESOURCE: a CPU worker started by a root without it runs as nobody and cannot be reused.
bool may_set_limits_of(pid_t pid) {
  rlimit current{};
  return prlimit(pid, RLIMIT_CPU, nullptr, &current) == 0;
}
}  // namespace

namespace {

// A worker that ran `so` (twice its input) and was kept after its reset: its process id; none where this process may
// not reuse workers.
std::optional<pid_t> kept_after(ReuseRig& rig, const std::filesystem::path& so) {
  auto w = rig.pool.acquire();
  const pid_t pid = w->pid();
  CHECK(rig.run(*w, so) == 6.0f);
  if (!may_set_limits_of(pid)) {
    MESSAGE("skipped: this process may not set the worker's limits (root without CAP_SYS_RESOURCE)");
    return std::nullopt;
  }
  rig.pool.recycle(std::move(w), true, 10.0);
  REQUIRE(rig.pool.counts().resets_passed == 1);
  return pid;
}

}  // namespace

TEST_CASE("a worker whose candidate ended cleanly serves the next one after a verified reset") {
  ReuseRig rig;
  auto twice = rig.build(candidate(2)), thrice = rig.build(candidate(3));
  const auto kept = kept_after(rig, twice);
  if (!kept) return;
  const pid_t pid = *kept;
  auto w = rig.pool.acquire();
  CHECK(w->pid() == pid);
  CHECK(rig.run(*w, thrice) == 9.0f);  // the second candidate's code, not the first's
  CHECK(w->uses() == 2);
  CHECK(rig.pool.counts().reused == 1);
  // A candidate whose evaluation was not clean ends its worker.
  rig.pool.recycle(std::move(w), false, 10.0);
  CHECK(rig.pool.counts().ended == 1);
  w = rig.pool.acquire();
  CHECK(w->pid() != pid);
}

TEST_CASE("kept workers end on request: the next candidate gets a spare, the kept one's process is gone") {
  // What an evaluator does before giving back the memory its workers map (Evaluator::release_device_memory).
  ReuseRig rig;
  auto twice = rig.build(candidate(2));
  const auto kept = kept_after(rig, twice);
  if (!kept) return;
  const pid_t pid = *kept;
  rig.pool.end_kept();
  CHECK(rig.pool.counts().ended == 1);
  CHECK(kill(pid, 0) != 0);  // ended and reaped
  auto w = rig.pool.acquire();
  CHECK(w->pid() != pid);
  CHECK(rig.pool.counts().reused == 0);
  CHECK(rig.run(*w, twice) == 6.0f);
  rig.pool.end_kept();  // none kept: nothing to do
  CHECK(rig.pool.counts().ended == 1);
}

TEST_CASE("a worker is ended when its candidate left something behind") {
  ReuseRig rig;
  struct Case {
    const char* name;
    std::string source;
    const char* reason;
  };
  const Case cases[] = {
      {"executable memory", candidate(2, "  static void* p = mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); (void)p;",
                                      "#include <sys/mman.h>"),
       "executable"},
      // (The project's compiler makes no unique symbols, -fno-gnu-unique, and the gate refuses dlopen: here neither
      // applies, as a candidate that found the dynamic linker by other means.)
      {"a library that cannot be unloaded (RTLD_NODELETE)",
       candidate(2, "",
                 "#include <dlfcn.h>\n__attribute__((constructor)) static void pin() {\n  Dl_info info;\n"
                 "  if (dladdr((void*)&pin, &info)) dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);\n}"),
       "cannot be unloaded"},
      {"bytes on the worker's socket", candidate(2, "  static bool sent = send(3, \"x\", 1, MSG_NOSIGNAL) == 1; (void)sent;",
                                                 "#include <sys/socket.h>"),
       "socket"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto w = rig.pool.acquire();
    const pid_t pid = w->pid();
    CHECK(rig.run(*w, rig.build(c.source)) == 6.0f);
    const int refused = rig.pool.counts().resets_refused;
    rig.pool.recycle(std::move(w), true, 10.0);
    const auto counts = rig.pool.counts();
    CHECK(counts.resets_refused == refused + 1);
    CHECK(counts.last_refusal.find(c.reason) != std::string::npos);
    auto next = rig.pool.acquire();
    CHECK(next->pid() != pid);
    CHECK(rig.run(*next, rig.build(candidate(3))) == 9.0f);  // a fresh worker judges the next candidate
  }
}

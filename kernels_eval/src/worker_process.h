#pragma once
// The evaluator's handle on one sandboxed worker process (see worker_protocol.h), and a pool that keeps
// workers started ahead of need. A worker serves one candidate and is then ended.
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <array>
#include <chrono>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/dtype.h"
#include "crucible/eval/eval_settings.h"
#include "crucible/eval/worker_counts.h"
#include "worker_image.h"

namespace crucible::eval {

namespace protocol {
struct ReleasePage;
struct LoadRequest;
struct Control;
}

struct ArenaTensor {
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::size_t guard_bytes = 0;  // outputs: a canary band right after the tensor, to catch writes past its end
};

// Several sets of (inputs, outputs) laid out after the control page, each tensor 256-byte aligned, each output
// followed by a guard band.
struct ArenaLayout {
  std::size_t bytes = 0;
  std::vector<std::vector<ArenaTensor>> inputs;   // [set][input]
  std::vector<std::vector<ArenaTensor>> outputs;  // [set][output]
  int sets() const { return static_cast<int>(inputs.size()); }
};

ArenaLayout plan_arena(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs, int sets);


// How a load or a call ended.
struct CallOutcome {
  // unsealed: the worker answered its load but its run-stage filter never appeared (a constructor kept the load
  // stage); budget: the evaluation's whole wall-clock budget ran out.
  enum class Kind {
    ok, candidate_error, crashed, forbidden_syscall, timed_out, cpu_limit, worker_lost, device_error, unsealed, budget
  };
  Kind kind = Kind::ok;
  int rc = 0;  // device_error: the CUDA error code
  double seconds = 0.0;
  std::string detail;
  double device_seconds = -1.0;  // CUDA workers: the call's time by events, as the worker reported it
  double own_kernel_share = -1.0;  // CUDA workers, profiled calls: see Control::own_kernel_share
  // Queued launches: seconds from ringing to the candidate's return, while its GPU work waited (-1 otherwise).
  // `seconds` then runs from the release of the GPU to the answer.
  double launch_seconds = -1.0;
  bool ok() const { return kind == Kind::ok; }
};

// Shared memory holding the tensors of a job, owned by the evaluator and lent to one worker at a time.
// Reusing it matters: faulting in tens of MB of fresh pages costs more than the rest of an evaluation.
class SharedArena {
 public:
  SharedArena();
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  void reserve(std::size_t bytes);  // grows, never shrinks; contents are not preserved on growth
  void reset_control();             // zeroes the doorbell page before a new worker uses it
  std::byte* data() const { return base_; }
  std::size_t size() const { return bytes_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// Device memory a CUDA worker maps for its tensors (the layout's offsets are into it), and the null calls it
// serves before the candidate is loaded, each preceded by `before_call` as a real call would be.
struct DeviceShare {
  int device = 0;
  std::array<uint8_t, 64> ipc_handle{};
  std::size_t bytes = 0;
  int null_calls = 0;
  std::function<void()> before_call;
  // Queued launches (docs/cuda.md): each call's GPU work waits until the candidate has returned, and is timed from
  // the evaluator's release of the GPU; the candidate's launching is timed apart, as a floor.
  bool queued_launches = false;
};

class WorkerProcess {
 public:
  // `visible_devices`, when given, replaces the evaluator's CUDA_VISIBLE_DEVICES for this worker.
  static std::unique_ptr<WorkerProcess> spawn(const std::filesystem::path& binary,
                                              const std::vector<std::string>& args = {},
                                              const std::string& visible_devices = {});
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Lends the arena (which must hold the layout), has the worker load the candidate and seal itself.
  // `host_null_calls` (CPU workers): null calls, each followed by a sync as a timed call is, served before the
  // candidate is loaded; their CPU cost is the harness's own share of a timed call.
  CallOutcome load(const std::filesystem::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                   const WorkerLimits& limits, double timeout_s, const DeviceShare* device = nullptr,
                   int host_null_calls = 0);
  // Wall-clock seconds of each null call served during load (trusted code only: the fixed cost of a call).
  const std::vector<double>& null_call_seconds() const { return null_calls_; }
  // CPU seconds the worker process used in each host null call with its sync (trusted code only).
  const std::vector<double>& null_call_cpu_seconds() const { return null_call_cpu_; }
  // Queued launches: each null call's launching (see CallOutcome::launch_seconds); empty when calls are not held.
  const std::vector<double>& null_launch_seconds() const { return null_launches_; }
  // Queued launches: whether this worker's calls are held (false once a call was released without it).
  bool holding() const { return holding_; }
  // CPU time the worker process has used so far, all its threads, user and system, read by this process through
  // the worker's CPU clock (clock_getcpuclockid), which nothing inside the worker can set; -1 once it is gone.
  double cpu_seconds() const;
  // The same, once the worker has gone to sleep waiting for its next call (at most ~1 ms): the kernel brings a
  // process's CPU time read from outside up to date only when it is switched out or at a tick, so a running
  // worker's figure can lag by a whole call.
  double cpu_seconds_when_idle();
  // Runs the worker on the CPU this thread is on now, and this thread there too, until release_cpu(): the two take
  // turns (a waiting caller yields instead of spinning), so a candidate and a reference timed in pairs see the
  // same core's caches and speed. Across cores of a shared machine pairs drift by 10-20% from one run to the next;
  // on one core they agree within a few percent. False when affinity cannot be set (nothing is changed then).
  bool share_cpu();
  void release_cpu();
  // Runs crucible_forward on one set. `seconds` is measured here, from ringing the doorbell to seeing
  // the worker's completion, so the candidate cannot touch it.
  // With `then_sync`, the sync below follows at once (the worker is not stopped in between) and its time
  // is part of the outcome's.
  // With `profile` (CUDA workers), the worker also measures the call's kernel coverage.
  CallOutcome call(int set, double timeout_s, bool then_sync = false, bool profile = false);
  // Returns once every earlier call has returned inside the worker. A candidate that signals completion
  // early and works on would show its hidden time here.
  CallOutcome sync(double timeout_s) { return call(sets_, timeout_s); }

  // Reuse (docs/cuda.md, "Reusing a worker"). Before the first load: the worker may serve later candidates. After
  // a candidate: reset() has it unload the candidate, prove itself clean (its report, its self-test on a challenge
  // chosen here, and its process image read from outside against the one recorded after its trusted setup) and
  // wait for the next load(), which then sends only the request. Empty when clean, else why not; the worker must
  // then be ended. A later load serves no null calls: their costs stay those measured before any candidate.
  void allow_reuse() { reuse_allowed_ = true; }
  std::string reset(double timeout_s);
  int uses() const { return uses_; }          // candidates loaded so far
  bool clean() const { return clean_; }       // every load and call of the current candidate ended ok
  bool reusable() const { return reuse_allowed_ && baseline_.has_value(); }

  std::byte* arena() const { return arena_; }
  pid_t pid() const { return pid_; }
  const std::filesystem::path& scratch_dir() const { return scratch_dir_; }

 private:
  WorkerProcess() = default;
  bool wait_hello(double timeout_s);
  CallOutcome lost(double seconds);  // classify the end of a worker that died
  CallOutcome read_load_reply(double timeout_s, double elapsed_s);
  void terminate();
  CallOutcome record(CallOutcome outcome);
  CallOutcome ring_and_wait(int set, double timeout_s, bool then_sync, bool profile);  // notes an outcome that was not ok: the worker is no longer clean
  // The steps of ring_and_wait: a held call's release (its launching's seconds, or -1; `start` moves to the release),
  // waiting for the call and for the sync after it (an outcome only when the worker timed out or was lost), and what
  // the worker said of the call.
  double release_held(protocol::Control* c, uint32_t seq, std::chrono::steady_clock::time_point& start);
  struct CallClock {
    std::chrono::steady_clock::time_point start;
    decltype(start + std::chrono::duration<double>()) deadline;  // counts from the doorbell
    double timeout_s;
  };
  std::optional<CallOutcome> wait_done(protocol::Control* c, uint32_t seq, const CallClock& clock);
  std::optional<CallOutcome> wait_synced(protocol::Control* c, const CallClock& clock);
  CallOutcome call_outcome(protocol::Control* c, int rc, int set, bool profile, double seconds, double launch_seconds,
                           std::chrono::steady_clock::time_point start);
  // On a shared CPU the worker runs only when this thread gives way.
  void wait_a_moment() const { sharing_cpu_ ? static_cast<void>(sched_yield()) : __builtin_ia32_pause(); }
  std::filesystem::path stage_candidate(const std::filesystem::path& so_path);
  CallOutcome load_first(const std::filesystem::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                         const WorkerLimits& limits, double timeout_s, const DeviceShare* device, int host_null_calls);
  CallOutcome load_next(const std::filesystem::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                        const WorkerLimits& limits, double timeout_s, const DeviceShare* device);
  void fill_request(protocol::LoadRequest& request, const std::filesystem::path& so_path, const ArenaLayout& layout,
                    std::size_t host_bytes, const WorkerLimits& limits, const DeviceShare* device);
  CallOutcome record_baseline(double timeout_s);
  std::size_t host_bytes_ = 0;

  bool reuse_allowed_ = false, clean_ = true, awaiting_next_ = false;
  int uses_ = 0;
  std::optional<ProcessImage> baseline_;
  std::filesystem::path staged_;  // the current candidate's copy in the scratch directory
  std::array<uint8_t, 64> arena_handle_{};
  std::size_t arena_bytes_ = 0;

  pid_t pid_ = -1;
  int socket_ = -1;
  std::byte* arena_ = nullptr;  // borrowed from the evaluator's SharedArena
  uint32_t sequence_ = 0;
  int sets_ = 0;
  bool reaped_ = false;
  int wait_status_ = 0;
  bool hello_seen_ = false;
  std::filesystem::path scratch_dir_;  // private temporary directory: the worker's cwd and TMPDIR
  std::vector<double> null_calls_, null_call_cpu_, null_launches_;
  // Queued launches: the release page (mapped here for writing; the worker has it read-only), and whether calls are
  // held (false again after a candidate kept one from returning while held: it waits for its own GPU work).
  protocol::ReleasePage* release_ = nullptr;
  bool holding_ = false;
  bool open_release_page(int& read_only_fd);
  unsigned cpu_limit_s_ = 0;  // the worker's RLIMIT_CPU, to tell the kernel's SIGXCPU from one the candidate sent
  double reaped_cpu_s_ = -1.0;  // its CPU time, from wait4, once reaped
  bool reap(bool block);
  bool wait_for_filters(int count, double timeout_s);  // Seccomp_filters in /proc/<pid>/status reaches `count`  // waits for the worker (or only looks, without `block`); true once it is reaped
  int stat_fd_ = -1;  // /proc/<pid>/stat, kept open to see the worker's scheduler state cheaply
  bool on_device_ = false;
  bool sharing_cpu_ = false;
  std::vector<unsigned char> caller_affinity_;  // the caller thread's cpu_set_t before share_cpu()

  friend class WorkerPool;
};

class WorkerPool {
 public:
  // `args` go to every worker (a CUDA worker's --device N).
  // A worker that needs long to start (an interpreter importing its libraries) gets `start_timeout_s` to say hello.
  // `visible_devices`: the GPUs its workers see, when not the evaluator's own (see WorkerProcess::spawn).
  explicit WorkerPool(std::filesystem::path binary, int warm = 1, std::vector<std::string> args = {},
                      double start_timeout_s = 10.0, std::string visible_devices = {});
  std::unique_ptr<WorkerProcess> acquire();  // a reset worker if one is kept, else a started one (replaced at once)
  std::unique_ptr<WorkerProcess> acquire_fresh();  // never a reused one
  // Reuse: each worker serves at most `max_uses` candidates (1: single use, as without reuse).
  void set_reuse(int max_uses) { max_uses_ = std::max(1, max_uses); }
  int max_uses() const { return max_uses_; }
  // After a candidate: a worker whose candidate ended cleanly (`clean`, and worker->clean()) and that may serve
  // more is reset and kept for the next acquire(); any other, or one whose reset finds anything amiss, is ended.
  void recycle(std::unique_ptr<WorkerProcess> worker, bool clean, double timeout_s);
  // Ends the workers kept for reuse (the next acquire() takes a spare): they hold what their last candidate's load
  // mapped, the evaluator's device arena among it.
  void end_kept();
  // What became of the workers: started (each a CUDA context for a CUDA worker), reused, reset refused.
  using Counts = WorkerCounts;
  Counts counts() const;
  // Waits, up to the start timeout in all, until the spares have said hello, and returns how many did: a node that
  // joins before its spares are up pays their start in its first evaluation, with every other node's spares starting
  // at the same moment (CUDA context creation is serialised across the host). A spare that failed is replaced by
  // acquire(); stopped spares (pause_starts) are not waited for.
  int wait_started();
  // While paused, spares that have not said hello yet are stopped (SIGSTOP), as are those started meanwhile: a worker
  // making its CUDA context slows the device's other work for a while (GPU timed calls by 1-5%), so timing pauses
  // them. A worker taken by acquire() is let go at once. Pauses nest; each needs its resume.
  void pause_starts();
  void resume_starts();
  int started() const { return started_; }
  int warm() const { return warm_; }  // spares kept started
  const std::filesystem::path& binary() const { return binary_; }

 private:
  void top_up();
  void stop_if_starting(WorkerProcess& w);
  std::filesystem::path binary_;
  std::vector<std::string> args_;
  std::string visible_devices_;
  int warm_;
  double start_timeout_s_;
  int started_ = 0;
  std::deque<std::unique_ptr<WorkerProcess>> idle_;
  int max_uses_ = 1;
  mutable std::mutex reset_mutex_;  // guards the reset workers kept and the counts
  std::deque<std::unique_ptr<WorkerProcess>> reset_;
  Counts counts_;
  int paused_ = 0;
  std::vector<pid_t> stopped_;
};

// Spares of `pools` (null entries skipped) paused for a scope: see WorkerPool::pause_starts.
class StartsPaused {
 public:
  explicit StartsPaused(std::vector<WorkerPool*> pools);
  ~StartsPaused();
  StartsPaused(const StartsPaused&) = delete;
  StartsPaused& operator=(const StartsPaused&) = delete;

 private:
  std::vector<WorkerPool*> pools_;
};

// The environment entry for a process that makes one CUDA context and runs one stream in it: a context with one
// hardware queue. The driver creates contexts one at a time per host, and such a context takes its turn in about
// half the time (6 started at once: 0.52 s, against 1.1 s with the default 8 queues, on an H100).
inline constexpr const char* kOneQueueContextEnv = "CUDA_DEVICE_MAX_CONNECTIONS=1";

// The worker binary beside the running executable, or $CRUCIBLE_WORKER, or the build-time default.
std::filesystem::path default_worker_binary();
// The same for the CUDA worker ($CRUCIBLE_CUDA_WORKER); empty when this build has none.
std::filesystem::path default_cuda_worker_binary();

// CRUCIBLE_TRACE_CALLS set: GPU loads and calls print where their time went, on stderr.
bool trace_calls();

}  // namespace crucible::eval

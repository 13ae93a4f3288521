#include "worker_process.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/task_spec.h"
#include "crucible/eval/worker_protocol.h"
#include "worker_self_test.h"
#include "fd_passing.h"

extern char** environ;

namespace crucible::eval {
namespace fs = std::filesystem;
namespace proto = protocol;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

constexpr std::size_t kGuardBytes = 4096;

ArenaTensor place(const TensorShape& t, std::size_t& cursor, std::size_t guard) {
  ArenaTensor a;
  a.dtype = t.dtype;
  a.shape = t.shape;
  a.strides = contiguous_strides(t.shape);
  a.bytes = static_cast<std::size_t>(numel(t.shape)) * dtype_size(t.dtype);
  a.offset = cursor;
  a.guard_bytes = guard;
  cursor = align_up(cursor + std::max<std::size_t>(a.bytes, 1) + guard, kAlign);
  return a;
}

proto::Control* control(std::byte* arena) { return reinterpret_cast<proto::Control*>(arena); }
constexpr int kNullCallSet = proto::kNullCall;
// How long a held call may take to launch before its GPU work is released anyway (see WorkerProcess::call).
constexpr double kHoldLimitSeconds = 0.25;

// The worker may have gone to sleep on `go` (after spinning a while): wake it, or it never sees the ring.
void ring(proto::Control* c, uint32_t seq) {
  c->go.store(seq, std::memory_order_seq_cst);
  if (c->worker_sleeping.load(std::memory_order_seq_cst))
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c->go), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

std::string describe_signal(int sig) {
  const char* name = sigabbrev_np(sig);
  return std::string("SIG") + (name ? name : std::to_string(sig)) + " (" + strsignal(sig) + ")";
}

int high_fd(int fd) {  // move an fd out of the range the worker expects (3, 4)
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return moved;
}

}  // namespace

ArenaLayout plan_arena(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs, int sets) {
  if (sets < 1 || sets > proto::kMaxSets) throw std::invalid_argument("arena: bad number of sets");
  if (inputs.size() + outputs.size() > static_cast<std::size_t>(proto::kMaxTensors))
    throw std::invalid_argument("arena: too many tensors");
  for (const auto& t : inputs)
    if (t.shape.size() > proto::kMaxDims) throw std::invalid_argument("arena: too many dimensions");
  for (const auto& t : outputs)
    if (t.shape.size() > proto::kMaxDims) throw std::invalid_argument("arena: too many dimensions");
  ArenaLayout layout;
  std::size_t cursor = proto::kControlBytes;
  for (int s = 0; s < sets; ++s) {
    layout.inputs.emplace_back();
    layout.outputs.emplace_back();
    for (const auto& t : inputs) layout.inputs.back().push_back(place(t, cursor, 0));
    for (const auto& t : outputs) layout.outputs.back().push_back(place(t, cursor, kGuardBytes));
  }
  layout.bytes = align_up(cursor, 4096);
  return layout;
}

bool trace_calls() {
  static const bool trace = std::getenv("CRUCIBLE_TRACE_CALLS") != nullptr;
  return trace;
}

namespace {
// $ENV_VAR, else the binary beside the running executable, else the build-time default.
fs::path find_worker(const char* env_var, const char* name, const char* build_default) {
  if (const char* env = std::getenv(env_var)) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / name)) return self.parent_path() / name;
  return build_default;
}
}  // namespace

fs::path default_worker_binary() {
#ifdef CRUCIBLE_WORKER_DEFAULT_PATH
  return find_worker("CRUCIBLE_WORKER", "crucible-worker", CRUCIBLE_WORKER_DEFAULT_PATH);
#else
  return find_worker("CRUCIBLE_WORKER", "crucible-worker", "crucible-worker");
#endif
}

fs::path default_cuda_worker_binary() {
#ifdef CRUCIBLE_CUDA_WORKER_DEFAULT_PATH
  return find_worker("CRUCIBLE_CUDA_WORKER", "crucible-cuda-worker", CRUCIBLE_CUDA_WORKER_DEFAULT_PATH);
#else
  return find_worker("CRUCIBLE_CUDA_WORKER", "crucible-cuda-worker", "");
#endif
}

std::unique_ptr<WorkerProcess> WorkerProcess::spawn(const fs::path& binary, const std::vector<std::string>& args,
                                                    const std::string& visible_devices) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
  std::unique_ptr<WorkerProcess> w(new WorkerProcess);
  w->socket_ = high_fd(fds[0]);
  int child_socket = high_fd(fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_socket, proto::kSocketFd);
  // Nothing of the evaluator's reaches the worker: stdio is /dev/null (a candidate cannot print into our
  // output), and every other inherited descriptor is closed. CRUCIBLE_WORKER_STDERR=FILE, the operator's choice for
  // finding why workers crash, appends their standard error (untrusted text) to FILE instead.
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  const char* stderr_file = std::getenv("CRUCIBLE_WORKER_STDERR");
  if (stderr_file && *stderr_file)
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file, O_WRONLY | O_APPEND | O_CREAT, 0600);
  else
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&actions, proto::kSocketFd + 1);
  const std::string scratch = make_scratch_dir("worker").string();
  w->scratch_dir_ = scratch;
  posix_spawn_file_actions_addchdir_np(&actions, scratch.c_str());
  // The worker inherits nothing but the dynamic loader's search path, which GPUs it may see, and its private
  // TMPDIR; its one stream needs one hardware queue.
  std::vector<std::string> env_strings{"TMPDIR=" + scratch, kOneQueueContextEnv};
  if (const char* value = std::getenv("LD_LIBRARY_PATH")) env_strings.push_back(std::string("LD_LIBRARY_PATH=") + value);
  if (!visible_devices.empty()) env_strings.push_back("CUDA_VISIBLE_DEVICES=" + visible_devices);
  else if (const char* value = std::getenv("CUDA_VISIBLE_DEVICES"))
    env_strings.push_back(std::string("CUDA_VISIBLE_DEVICES=") + value);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string path = binary.string();
  std::vector<std::string> arg_strings{path};
  arg_strings.insert(arg_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : arg_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A process group of its own: should the evaluator die while this worker is stopped (WorkerPool::pause_starts),
  // the group is orphaned with a stopped member, and the kernel sends it SIGHUP and SIGCONT, which end it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  int err = posix_spawn(&w->pid_, path.c_str(), &actions, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  close(child_socket);
  if (err != 0) {
    w->pid_ = -1;
    throw std::runtime_error("cannot start worker " + path + ": " + std::strerror(err));
  }
  return w;
}

WorkerProcess::~WorkerProcess() { terminate(); }

bool WorkerProcess::reap(bool block) {
  if (reaped_) return true;
  rusage usage{};
  pid_t got;
  while ((got = wait4(pid_, &wait_status_, block ? 0 : WNOHANG, &usage)) < 0 && errno == EINTR) {
  }
  if (got != pid_) return false;
  reaped_ = true;
  reaped_cpu_s_ = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  return true;
}

void WorkerProcess::terminate() {
  release_cpu();
  if (release_) munmap(release_, proto::kReleaseBytes);
  release_ = nullptr;
  holding_ = false;
  if (pid_ > 0 && !reaped_) {
    const auto killed = Clock::now();
    kill(pid_, SIGKILL);
    reap(true);
    reaped_ = true;
    if (trace_calls())
      std::fprintf(stderr, "worker %d ended in %.1f ms\n", static_cast<int>(pid_),
                   std::chrono::duration<double, std::milli>(Clock::now() - killed).count());
  }
  arena_ = nullptr;
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
  if (stat_fd_ >= 0) close(stat_fd_);
  stat_fd_ = -1;
  if (!scratch_dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(scratch_dir_, ignored);
    scratch_dir_.clear();
  }
}

bool WorkerProcess::wait_hello(double timeout_s) {
  if (hello_seen_) return true;
  pollfd pfd{socket_, POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
  proto::Hello hello{};
  if (recv(socket_, &hello, sizeof hello, 0) != sizeof hello || hello.magic != proto::kMagic) return false;
  hello_seen_ = true;
  if (trace_calls())
    std::fprintf(stderr, "worker %d started in %.1f ms (device context %.1f ms, profiler %.1f ms)\n",
                 static_cast<int>(pid_), hello.start_us / 1e3, hello.context_us / 1e3, hello.profiler_us / 1e3);
  return true;
}

CallOutcome WorkerProcess::lost(double seconds) {
  if (!reaped_) {
    // A worker can look lost while alive (a stray byte on the socket, a missed hello): never wait on it.
    if (!reap(false)) {
      kill(pid_, SIGKILL);
      reap(true);
      if (WIFSIGNALED(wait_status_) && WTERMSIG(wait_status_) == SIGKILL)
        return {CallOutcome::Kind::worker_lost, 0, seconds, "worker broke the protocol and was killed"};
    }
  }
  CallOutcome out;
  out.seconds = seconds;
  if (WIFSIGNALED(wait_status_)) {
    int sig = WTERMSIG(wait_status_);
    auto* c = arena_ ? control(arena_) : nullptr;
    const bool noted = c && c->crash_signal.load(std::memory_order_acquire) == sig;
    // Only the kernel's own enforcement is a sandbox or limit verdict: a signal the candidate sent itself is a crash.
    const bool by_seccomp = noted && c->crash_origin == 1 /* SYS_SECCOMP */;
    const bool by_cpu_limit = reaped_cpu_s_ + 0.5 >= static_cast<double>(cpu_limit_s_);
    if (sig == SIGSYS && by_seccomp) {
      out.kind = CallOutcome::Kind::forbidden_syscall;
      // The number only, and only a plausible one: a detail must not carry values the candidate chose (a refused
      // call's arguments could hold bytes of a file it read while loading).
      const int nr = c->crash_code;
      out.detail = "killed by the sandbox for a forbidden system call" +
                   (nr >= 0 && nr < 1024 ? " (number " + std::to_string(nr) + " on x86-64)" : std::string());
    } else if (sig == SIGXCPU && by_cpu_limit) {
      out.kind = CallOutcome::Kind::cpu_limit;
      out.detail = "CPU time limit exceeded (SIGXCPU)";
    } else {
      out.kind = CallOutcome::Kind::crashed;
      out.detail = "candidate crashed: " + describe_signal(sig);
      if ((sig == SIGSYS && !by_seccomp) || (sig == SIGXCPU && !by_cpu_limit))
        out.detail += ", sent by the candidate itself (not the sandbox's or a limit's doing)";
      // Whether the faulting address was null, not the address: that is the candidate's choice too.
      if (noted && (sig == SIGSEGV || sig == SIGBUS) && c->crash_address < 4096)
        out.detail += " at a null pointer (an allocation may have failed under the memory limit)";
      if (sig == SIGABRT) out.detail += " (abort, e.g. an uncaught exception such as std::bad_alloc)";
    }
  } else {
    out.kind = CallOutcome::Kind::worker_lost;
    out.detail = "worker exited unexpectedly with code " + std::to_string(WEXITSTATUS(wait_status_));
  }
  return out;
}

SharedArena::SharedArena() {
  fd_ = memfd_create("crucible-arena", MFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
}

SharedArena::~SharedArena() {
  if (base_) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

void SharedArena::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return;
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error(std::string("ftruncate arena: ") + std::strerror(errno));
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (mapped == MAP_FAILED) throw std::runtime_error(std::string("mmap arena: ") + std::strerror(errno));
  base_ = static_cast<std::byte*>(mapped);
  bytes_ = bytes;
}

void SharedArena::reset_control() { std::memset(base_, 0, proto::kControlBytes); }

double WorkerProcess::cpu_seconds() const {
  clockid_t clock;
  timespec ts{};
  if (reaped_ || clock_getcpuclockid(pid_, &clock) != 0 || clock_gettime(clock, &ts) != 0) return -1.0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double WorkerProcess::cpu_seconds_when_idle() {
  auto* c = arena_ ? control(arena_) : nullptr;
  if (stat_fd_ < 0 && !reaped_) stat_fd_ = open(("/proc/" + std::to_string(pid_) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  const auto deadline = Clock::now() + std::chrono::milliseconds(1);
  while (c && stat_fd_ >= 0 && Clock::now() < deadline) {
    if (c->worker_sleeping.load(std::memory_order_acquire) != 1) {
      sharing_cpu_ ? static_cast<void>(sched_yield()) : __builtin_ia32_pause();
      continue;
    }
    char buffer[512];
    const ssize_t n = pread(stat_fd_, buffer, sizeof buffer - 1, 0);
    if (n <= 0) break;
    buffer[n] = '\0';
    const char* state = std::strrchr(buffer, ')');  // "pid (comm) S ...": comm may hold anything but a last ')'
    if (state && state[1] == ' ' && state[2] == 'S') break;
  }
  return cpu_seconds();
}

bool WorkerProcess::share_cpu() {
  if (sharing_cpu_ || reaped_) return sharing_cpu_;
  const int cpu = sched_getcpu();
  cpu_set_t before, one;
  if (cpu < 0 || sched_getaffinity(0, sizeof before, &before) != 0) return false;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(pid_, sizeof one, &one) != 0) return false;
  if (sched_setaffinity(0, sizeof one, &one) != 0) return false;  // the worker alone pinned does no harm
  const auto* bytes = reinterpret_cast<const unsigned char*>(&before);
  caller_affinity_.assign(bytes, bytes + sizeof before);
  sharing_cpu_ = true;
  if (trace_calls()) std::fprintf(stderr, "worker %d shares cpu %d with the evaluator\n", static_cast<int>(pid_), cpu);
  return true;
}

void WorkerProcess::release_cpu() {
  if (!sharing_cpu_) return;
  sched_setaffinity(0, caller_affinity_.size(), reinterpret_cast<const cpu_set_t*>(caller_affinity_.data()));
  sharing_cpu_ = false;
}

bool WorkerProcess::open_release_page(int& read_only_fd) {
  const int fd = memfd_create("crucible-release", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  void* page = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(proto::kReleaseBytes)) == 0)
    page = mmap(nullptr, proto::kReleaseBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  // Sealed: this mapping stays writable, and no other can be made so, whatever descriptor reaches the file.
  if (page != MAP_FAILED &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    munmap(page, proto::kReleaseBytes);
    page = MAP_FAILED;
  }
  // The worker gets a descriptor opened for reading only: no mapping of it can ever be made writable.
  read_only_fd = page == MAP_FAILED ? -1 : open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  close(fd);
  if (read_only_fd < 0) {
    if (page != MAP_FAILED) munmap(page, proto::kReleaseBytes);
    return false;
  }
  release_ = static_cast<proto::ReleasePage*>(page);
  return true;
}

void WorkerProcess::fill_request(proto::LoadRequest& request, const fs::path& so_path, const ArenaLayout& layout,
                                 std::size_t host_bytes, const WorkerLimits& limits, const DeviceShare* device) {
  std::memset(&request, 0, sizeof request);
  request.magic = proto::kMagic;
  request.num_sets = static_cast<uint32_t>(layout.sets());
  request.num_inputs = static_cast<uint32_t>(layout.inputs[0].size());
  request.num_outputs = static_cast<uint32_t>(layout.outputs[0].size());
  request.arena_bytes = host_bytes;
  request.cuda_device = device ? device->device : -1;
  if (device) {
    request.null_calls = static_cast<uint32_t>(device->null_calls);
    request.device_arena_bytes = device->bytes;
    std::memcpy(request.device_arena_handle, device->ipc_handle.data(), proto::kIpcHandleBytes);
  }
  request.memory_limit_bytes = limits.memory_bytes;
  request.cpu_seconds = limits.cpu_seconds;
  const std::string so = so_path.string();
  if (so.size() >= sizeof request.so_path) throw std::invalid_argument("shared object path too long");
  std::memcpy(request.so_path, so.c_str(), so.size() + 1);
  for (int s = 0; s < layout.sets(); ++s) {
    std::size_t t = 0;
    for (const auto* group : {&layout.inputs[s], &layout.outputs[s]})
      for (const auto& a : *group) {
        auto& d = request.tensors[s][t++];
        d.dtype = static_cast<int32_t>(a.dtype);
        d.ndim = static_cast<int32_t>(a.shape.size());
        for (std::size_t i = 0; i < a.shape.size(); ++i) {
          d.shape[i] = a.shape[i];
          d.strides[i] = a.strides[i];
        }
        d.offset = a.offset;
      }
  }
}

CallOutcome WorkerProcess::load(const fs::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                                const WorkerLimits& limits, double timeout_s, const DeviceShare* device,
                                int host_null_calls) {
  if (awaiting_next_) return record(load_next(so_path, layout, arena, limits, timeout_s, device));
  return record(load_first(so_path, layout, arena, limits, timeout_s, device, host_null_calls));
}

CallOutcome WorkerProcess::load_first(const fs::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                                      const WorkerLimits& limits, double timeout_s, const DeviceShare* device,
                                      int host_null_calls) {
  auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (!wait_hello(timeout_s)) return lost(elapsed());
  // With device memory the host arena holds only the control page.
  const std::size_t host_bytes = device ? proto::kControlBytes : layout.bytes;
  if (arena.size() < host_bytes) throw std::invalid_argument("arena smaller than the layout");
  if (device && device->bytes < layout.bytes) throw std::invalid_argument("device arena smaller than the layout");
  arena.reset_control();
  arena_ = arena.data();
  sets_ = layout.sets();

  cpu_limit_s_ = limits.cpu_seconds;
  on_device_ = device != nullptr;
  auto request = std::make_unique<proto::LoadRequest>();
  fill_request(*request, reuse_allowed_ ? stage_candidate(so_path) : fs::absolute(so_path), layout, host_bytes, limits,
               device);
  // A host null call is rung with its sync, and the worker serves both as null calls.
  if (!device) request->null_calls = static_cast<uint32_t>(2 * std::max(0, host_null_calls));
  request->reusable = reuse_allowed_ ? 1 : 0;
  if (device) arena_handle_ = device->ipc_handle;
  arena_bytes_ = device ? device->bytes : 0;
  host_bytes_ = host_bytes;
  // The arena's descriptor travels with the request, and the release page's with it when calls are held.
  int fds[2] = {arena.fd(), -1};
  const bool hold = device && device->queued_launches && open_release_page(fds[1]);
  const bool sent = send_with_fds(socket_, request.get(), sizeof *request, fds, hold ? 2 : 1);
  if (hold) close(fds[1]);
  if (!sent) return lost(elapsed());

  const bool trace = trace_calls();
  if (trace) std::fprintf(stderr, "load: request sent after %.1f ms\n", elapsed() * 1e3);
  null_calls_.clear();
  null_call_cpu_.clear();
  null_launches_.clear();
  double cpu_before = cpu_seconds_when_idle();
  for (int i = 0; !device && i < host_null_calls; ++i) {
    CallOutcome out = call(kNullCallSet, timeout_s, /*then_sync=*/true);
    if (!out.ok()) return out;
    const double cpu_after = cpu_seconds_when_idle();
    null_calls_.push_back(out.seconds);
    null_call_cpu_.push_back(cpu_after - cpu_before);
    cpu_before = cpu_after;
  }
  for (int i = 0; device && i < device->null_calls; ++i) {
    if (device->before_call) device->before_call();
    // Whether the worker could map the release page is known once it has answered its first call, which is not held.
    holding_ = hold && i > 0 && control(arena_)->hold_ready != 0;
    CallOutcome out = call(kNullCallSet, timeout_s);
    if (!out.ok()) {
      // A worker that could not set up its device says why in its load reply before it exits.
      CallOutcome reply = read_load_reply(1.0, elapsed());
      return reply.ok() ? out : reply;
    }
    if (hold && i == 0) continue;  // not held: not a sample of a held call's fixed cost
    null_calls_.push_back(out.seconds);
    if (out.launch_seconds >= 0.0) null_launches_.push_back(out.launch_seconds);
  }
  if (trace) std::fprintf(stderr, "load: null calls done after %.1f ms%s\n", elapsed() * 1e3,
                          hold ? (holding_ ? ", calls held" : ", calls not held (the worker could not map the release page)") : "");
  if (reuse_allowed_) {
    CallOutcome setup = record_baseline(timeout_s);
    if (!setup.ok()) {
      CallOutcome reply = read_load_reply(1.0, elapsed());
      return reply.ok() ? setup : reply;
    }
  }
  CallOutcome reply = read_load_reply(timeout_s, elapsed());
  if (trace) std::fprintf(stderr, "load: reply after %.1f ms\n", elapsed() * 1e3);
  if (reply.ok()) uses_ = 1;
  return reply;
}

bool WorkerProcess::wait_for_filters(int count, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  const std::string path = "/proc/" + std::to_string(pid_) + "/status";
  do {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return false;
    char line[256];
    int filters = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "Seccomp_filters: %d", &filters) == 1) break;
    std::fclose(f);
    if (filters >= count) return true;
    timespec pause{0, 200000};
    nanosleep(&pause, nullptr);
  } while (Clock::now() < deadline);
  return false;
}

CallOutcome WorkerProcess::read_load_reply(double timeout_s, double elapsed_s) {
  auto start = Clock::now();
  auto elapsed = [&] { return elapsed_s + std::chrono::duration<double>(Clock::now() - start).count(); };
  pollfd pfd{socket_, POLLIN, 0};
  int ready = poll(&pfd, 1, static_cast<int>(timeout_s * 1000));
  if (ready == 0) {
    terminate();
    return {CallOutcome::Kind::timed_out, 0, elapsed(), "loading the candidate exceeded the time limit"};
  }
  proto::LoadReply reply{};
  if (recv(socket_, &reply, sizeof reply, 0) != sizeof reply || reply.magic != proto::kMagic) return lost(elapsed());
  if (!reply.ok) {
    terminate();
    // The text is the worker's (a candidate's constructor can send this reply): read within its array, bounded.
    const std::size_t length = std::min<std::size_t>(strnlen(reply.error, sizeof reply.error), 300);
    return {CallOutcome::Kind::candidate_error, 0, elapsed(), "load failed: " + std::string(reply.error, length)};
  }
  // The reply is no proof that the worker sealed itself: a static constructor can send it and never return. The
  // run-stage filter must appear in the kernel's view of the worker (the load stage's one, and the run stage's).
  if (!on_device_ && !wait_for_filters(2, std::min(timeout_s, 2.0))) {
    terminate();
    return {CallOutcome::Kind::unsealed, 0, elapsed(),
            "the worker answered its load but never installed its run-stage sandbox (a constructor kept the load "
            "stage?)"};
  }
  return {CallOutcome::Kind::ok, 0, elapsed(), {}};
}

CallOutcome WorkerProcess::call(int set, double timeout_s, bool then_sync, bool profile) {
  return record(ring_and_wait(set, timeout_s, then_sync, profile));
}

CallOutcome WorkerProcess::ring_and_wait(int set, double timeout_s, bool then_sync, bool profile) {
  if (!arena_ || reaped_) return {CallOutcome::Kind::worker_lost, 0, 0.0, "worker is not loaded"};
  auto* c = control(arena_);
  uint32_t seq = ++sequence_;
  c->set = set;
  c->profile = profile ? 1 : 0;
  const bool hold = holding_ && set != sets_;
  c->hold = hold ? 1 : 0;
  auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  ring(c, seq);
  const double launch_seconds = hold ? release_held(c, seq, start) : -1.0;
  const CallClock clock{start, deadline, timeout_s};
  if (auto ended = wait_done(c, seq, clock)) return *ended;
  const int rc = c->rc;
  if (then_sync && rc == 0)
    if (auto ended = wait_synced(c, clock)) return *ended;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return call_outcome(c, rc, set, profile, seconds, launch_seconds, start);
}

// Held: wait for the candidate to return from launching, then release its GPU work and time from there. A candidate
// that waits for its own GPU work never returns while held: released after a while, timed from the doorbell (its
// work may not have been held at all: the worker says so only by returning), and no later call of this worker is held.
double WorkerProcess::release_held(proto::Control* c, uint32_t seq, Clock::time_point& start) {
  const auto give_up = start + std::chrono::duration<double>(kHoldLimitSeconds);
  while (c->launched.load(std::memory_order_acquire) != seq && c->done.load(std::memory_order_acquire) != seq &&
         Clock::now() < give_up)
    wait_a_moment();
  const auto released = Clock::now();
  release_->release.store(seq, std::memory_order_seq_cst);
  if (c->launched.load(std::memory_order_acquire) != seq) {
    holding_ = false;
    return -1.0;
  }
  const double launch_seconds = std::chrono::duration<double>(released - start).count();
  start = released;
  return launch_seconds;
}

// Spin for precise end times; after 50 ms (from the doorbell, or a held call's release), poll every 50 us (under
// 0.1% of such a call).
std::optional<CallOutcome> WorkerProcess::wait_done(proto::Control* c, uint32_t seq, const CallClock& clock) {
  const auto [start, deadline, timeout_s] = clock;
  for (uint64_t spin = 1;; ++spin) {
    if (c->done.load(std::memory_order_acquire) == seq) return std::nullopt;
    if ((spin & 0x3fff) != 0) {
      wait_a_moment();
      continue;
    }
    auto now = Clock::now();
    if (reap(false)) return lost(std::chrono::duration<double>(now - start).count());
    if (now > deadline) {
      terminate();
      return CallOutcome{CallOutcome::Kind::timed_out, 0, timeout_s,
                         "no result within the wall-clock limit of " + std::to_string(timeout_s) + " s; worker killed"};
    }
    if (now - start > std::chrono::milliseconds(50)) {
      timespec pause{0, 50000};
      nanosleep(&pause, nullptr);
    }
  }
}

// Same doorbell, one more round: answered only once the candidate has returned.
std::optional<CallOutcome> WorkerProcess::wait_synced(proto::Control* c, const CallClock& clock) {
  const auto [start, deadline, timeout_s] = clock;
  uint32_t sync_seq = ++sequence_;
  c->set = sets_;
  ring(c, sync_seq);
  for (uint64_t spin = 1; c->done.load(std::memory_order_acquire) != sync_seq; ++spin) {
    if ((spin & 0x3fff) != 0) {
      wait_a_moment();
      continue;
    }
    if (reap(false)) return lost(std::chrono::duration<double>(Clock::now() - start).count());
    if (Clock::now() > deadline) {
      terminate();
      return CallOutcome{CallOutcome::Kind::timed_out, 0, timeout_s,
                         "the candidate kept working past the wall-clock limit"};
    }
  }
  return std::nullopt;
}

// What the worker said of the call: its return code (read when the call was done), the device's error, its times.
CallOutcome WorkerProcess::call_outcome(proto::Control* c, int rc, int set, bool profile, double seconds,
                                        double launch_seconds, Clock::time_point start) {
  if (rc == proto::kDeviceErrorRc) {
    // The worker ends itself: its CUDA context cannot be trusted after an error.
    std::string text(c->cuda_error_text, strnlen(c->cuda_error_text, sizeof c->cuda_error_text));
    terminate();
    return {CallOutcome::Kind::device_error, c->cuda_error, seconds, text};
  }
  if (rc == proto::kRefusalRc)
    return {CallOutcome::Kind::candidate_error, rc, seconds,
            std::string(c->cuda_error_text, strnlen(c->cuda_error_text, sizeof c->cuda_error_text))};
  if (rc != 0)
    return {CallOutcome::Kind::candidate_error, rc, seconds, "crucible_forward returned " + std::to_string(rc)};
  CallOutcome out{CallOutcome::Kind::ok, 0, seconds, {}};
  out.launch_seconds = launch_seconds;
  if (on_device_ && set != sets_) out.device_seconds = c->device_ms * 1e-3;
  if (on_device_ && profile) out.own_kernel_share = c->own_kernel_share;
  if (trace_calls() && on_device_) {
    auto ns = [](Clock::time_point t) {
      return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    double rung = ns(start);
    std::fprintf(stderr, "call set %d: ring->seen %.1f us, launch %.1f us, sync %.1f us, wall %.1f us, events %.1f us\n",
                 set, (c->seen_ns - rung) / 1e3, (c->launched_ns - c->seen_ns) / 1e3,
                 (c->synced_ns - c->launched_ns) / 1e3, seconds * 1e6, c->device_ms * 1e3);
  }
  return out;
}

CallOutcome WorkerProcess::record(CallOutcome outcome) {
  if (!outcome.ok()) clean_ = false;
  return outcome;
}

// A reusable worker reads its candidates from its own scratch directory (its file rules allow only that one): a copy
// per candidate, the last one removed.
fs::path WorkerProcess::stage_candidate(const fs::path& so_path) {
  std::error_code ignored;
  if (!staged_.empty()) fs::remove(staged_, ignored);
  staged_ = scratch_dir_ / ("candidate-" + std::to_string(uses_ + 1) + ".so");
  fs::copy_file(so_path, staged_, fs::copy_options::overwrite_existing);
  // A CPU worker started as root reads it as nobody: the copy readable, the directory searchable (not listable).
  fs::permissions(staged_, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(scratch_dir_, fs::perms::others_exec, fs::perm_options::add);
  return staged_;
}

// The end of the worker's trusted setup (see the worker's setup_done): its device state, then its process image here.
CallOutcome WorkerProcess::record_baseline(double timeout_s) {
  CallOutcome device_state = call(proto::kSetupDoneCall, timeout_s);
  if (!device_state.ok()) return device_state;
  baseline_ = read_process_image(pid_);
  return call(proto::kSetupDoneCall, timeout_s);
}

CallOutcome WorkerProcess::load_next(const fs::path& so_path, const ArenaLayout& layout, SharedArena& arena,
                                     const WorkerLimits& limits, double timeout_s, const DeviceShare* device) {
  awaiting_next_ = false;
  const std::size_t host_bytes = device ? proto::kControlBytes : layout.bytes;
  const bool same_arena = arena.data() == arena_ && host_bytes == host_bytes_ &&
                          (device ? device->bytes == arena_bytes_ && device->ipc_handle == arena_handle_ : true);
  if (!same_arena || (device && device->queued_launches)) {
    terminate();
    return {CallOutcome::Kind::worker_lost, 0, 0.0, "a reused worker needs the same arena and eager launches"};
  }
  // The control page may have served other workers since: it starts where this worker's sequence stands.
  arena.reset_control();
  auto* c = control(arena_);
  c->go.store(sequence_, std::memory_order_relaxed);
  c->done.store(sequence_, std::memory_order_relaxed);
  c->launched.store(sequence_, std::memory_order_relaxed);
  sets_ = layout.sets();
  // The CPU limit counts the whole process: this candidate gets its own on top of what the worker used so far.
  const double used = cpu_seconds();
  cpu_limit_s_ = static_cast<unsigned>(std::max(0.0, used) + 1.0) + limits.cpu_seconds;
  const rlimit cpu{cpu_limit_s_, RLIM_INFINITY};  // the worker left its hard limit open (see its main)
  auto request = std::make_unique<proto::LoadRequest>();
  fill_request(*request, stage_candidate(so_path), layout, host_bytes, limits, device);
  request->reusable = 1;
  request->null_calls = 0;
  if (used < 0 || prlimit(pid_, RLIMIT_CPU, &cpu, nullptr) != 0 ||
      send(socket_, request.get(), sizeof *request, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof *request)) {
    terminate();
    return {CallOutcome::Kind::worker_lost, 0, 0.0, "cannot hand the reused worker its next candidate"};
  }
  CallOutcome reply = read_load_reply(timeout_s, 0.0);
  if (reply.ok()) ++uses_;
  return reply;
}

std::string WorkerProcess::reset(double timeout_s) {
  if (!reusable() || !clean_ || reaped_ || awaiting_next_) return "the worker is not reusable";
  auto* c = control(arena_);
  const uint64_t challenge = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  c->reset_challenge = challenge;
  c->reset_ok = 0;
  c->reset_checksum = 0;
  const CallOutcome out = call(proto::kResetCall, timeout_s);
  if (!out.ok()) return "the reset call: " + out.detail;
  if (c->reset_ok != 1)  // the worker's own words: bounded, and only for the log
    return "the worker's reset: " + std::string(c->reset_error, strnlen(c->reset_error, 200));
  if (c->reset_checksum != self_test::expected(challenge)) return "the self-test's answer is wrong";
  // Anything waiting on the socket was sent by the candidate (the worker answers only loads).
  pollfd pfd{socket_, POLLIN, 0};
  if (poll(&pfd, 1, 0) != 0) return "the candidate wrote to the worker's socket";
  const auto now = read_process_image(pid_);
  if (!now) return "cannot read the worker's process image";
  ImageAllowance allowance;
  allowance.added_filters = 2;  // the load stage's and the reuse stage's, installed after the baseline
  if (std::string why = compare_images(*baseline_, *now, allowance); !why.empty()) return why;
  awaiting_next_ = true;
  clean_ = true;
  return {};
}

WorkerPool::WorkerPool(fs::path binary, int warm, std::vector<std::string> args, double start_timeout_s,
                       std::string visible_devices)
    : binary_(std::move(binary)),
      args_(std::move(args)),
      visible_devices_(std::move(visible_devices)),
      warm_(std::max(warm, 0)),
      start_timeout_s_(start_timeout_s) {
  if (!fs::exists(binary_)) throw std::runtime_error("worker binary not found: " + binary_.string());
  // What evaluators killed outright left behind (their workers end by themselves, see the worker's main).
  remove_orphaned_scratch_dirs("worker");
  remove_orphaned_scratch_dirs("compile");
  top_up();
}

void WorkerPool::top_up() {
  while (static_cast<int>(idle_.size()) < warm_) {
    idle_.push_back(WorkerProcess::spawn(binary_, args_, visible_devices_));
    ++started_;
    if (paused_ > 0) stop_if_starting(*idle_.back());
  }
}

void WorkerPool::stop_if_starting(WorkerProcess& w) {
  if (w.wait_hello(0) || kill(w.pid(), SIGSTOP) != 0) return;
  stopped_.push_back(w.pid());
}

void WorkerPool::pause_starts() {
  if (paused_++ > 0) return;
  for (auto& w : idle_) stop_if_starting(*w);
}

void WorkerPool::resume_starts() {
  if (paused_ == 0 || --paused_ > 0) return;
  for (pid_t pid : stopped_) kill(pid, SIGCONT);
  stopped_.clear();
}

StartsPaused::StartsPaused(std::vector<WorkerPool*> pools) : pools_(std::move(pools)) {
  for (auto* p : pools_)
    if (p) p->pause_starts();
}

StartsPaused::~StartsPaused() {
  for (auto* p : pools_)
    if (p) p->resume_starts();
}

int WorkerPool::wait_started() {
  const auto deadline = Clock::now() + std::chrono::duration<double>(start_timeout_s_);
  int started = 0;
  for (auto& w : idle_) {
    if (std::find(stopped_.begin(), stopped_.end(), w->pid()) != stopped_.end()) continue;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    started += w->wait_hello(std::max(0.0, left));
  }
  return started;
}

std::unique_ptr<WorkerProcess> WorkerPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(reset_mutex_);
    if (!reset_.empty()) {
      auto w = std::move(reset_.front());
      reset_.pop_front();
      ++counts_.reused;
      return w;
    }
  }
  return acquire_fresh();
}

void WorkerPool::recycle(std::unique_ptr<WorkerProcess> worker, bool clean, double timeout_s) {
  if (!worker) return;
  std::string why;
  if (!clean || !worker->clean() || worker->uses() >= max_uses_ || !worker->reusable()) {
    if (trace_calls())
      std::fprintf(stderr, "worker %d ended: clean %d/%d, uses %d of %d, reusable %d\n", static_cast<int>(worker->pid()),
                   clean, worker->clean(), worker->uses(), max_uses_, worker->reusable());
    worker.reset();
  } else if (why = worker->reset(timeout_s); !why.empty()) {
    if (trace_calls()) std::fprintf(stderr, "worker %d not reused: %s\n", static_cast<int>(worker->pid()), why.c_str());
    worker.reset();
  }
  std::lock_guard<std::mutex> lock(reset_mutex_);
  if (!worker) {
    ++counts_.ended;
    if (!why.empty()) ++counts_.resets_refused, counts_.last_refusal = why;
    return;
  }
  ++counts_.resets_passed;
  reset_.push_back(std::move(worker));
  // One kept per spare at most: a kept worker holds its context and memory.
  while (static_cast<int>(reset_.size()) > std::max(1, warm_)) reset_.pop_front();
}

void WorkerPool::end_kept() {
  std::deque<std::unique_ptr<WorkerProcess>> ending;
  {
    std::lock_guard<std::mutex> lock(reset_mutex_);
    ending.swap(reset_);
    counts_.ended += static_cast<int>(ending.size());
  }
  ending.clear();  // each ends its process (outside the lock: ending waits for the process)
}

WorkerPool::Counts WorkerPool::counts() const {
  std::lock_guard<std::mutex> lock(reset_mutex_);
  Counts c = counts_;
  c.started = started_;
  return c;
}

std::unique_ptr<WorkerProcess> WorkerPool::acquire_fresh() {
  std::unique_ptr<WorkerProcess> w;
  while (!idle_.empty() && !w) {
    w = std::move(idle_.front());
    idle_.pop_front();
    if (auto it = std::find(stopped_.begin(), stopped_.end(), w->pid()); it != stopped_.end()) {
      kill(w->pid(), SIGCONT);
      stopped_.erase(it);
    }
    if (!w->wait_hello(start_timeout_s_) || w->reap(false)) w.reset();  // died while idle: drop it
  }
  if (!w) {
    w = WorkerProcess::spawn(binary_, args_, visible_devices_);
    ++started_;
    if (start_timeout_s_ > 10.0) w->wait_hello(start_timeout_s_);  // else the load's own wait covers it
  }
  top_up();
  if (max_uses_ > 1) w->allow_reuse();
  return w;
}

}  // namespace crucible::eval

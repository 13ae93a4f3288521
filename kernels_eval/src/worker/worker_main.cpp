// crucible-worker: loads one candidate into a sandboxed process and runs calls on request.
// Started by the evaluator with its socket on fd 3; the shared arena arrives with the load request. After the
// candidate is loaded the process is sealed by seccomp, and the evaluator ends it after the job, unless the request
// made it reusable: then, on the evaluator's word, it unloads the candidate, proves itself clean and loads the next
// (docs/cuda.md, "Reusing a worker").
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <linux/capability.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <memory>
#include <vector>

#include "crucible/kernel.h"
#include "crucible/eval/landlock.h"
#include "crucible/eval/worker_protocol.h"
#include "crash_notes.h"
#include "fd_passing.h"
#include "seccomp_filter.h"
#include "worker_device.h"

namespace proto = crucible::eval::protocol;
using crucible::eval::install_load_stage_filter;
using crucible::eval::install_run_stage_filter;
using crucible::eval::install_reuse_stage_filter;
using crucible::eval::FileRules;
using crucible::eval::build_file_rules;
using crucible::eval::enter_file_rules;
using crucible::eval::landlock_abi;
namespace device = crucible::eval::worker;

namespace {

proto::Control* g_control = nullptr;

bool send_all(const void* data, size_t size) {
  return send(proto::kSocketFd, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

bool reply_load(bool ok, const std::string& error) {
  proto::LoadReply reply{};
  reply.magic = proto::kMagic;
  reply.ok = ok ? 1 : 0;
  std::snprintf(reply.error, sizeof reply.error, "%s", error.c_str());
  return send_all(&reply, sizeof reply);
}

// Root's capabilities would let a candidate read the evaluator's memory through /proc despite it being
// non-dumpable; the worker needs none of them.
void drop_capabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  syscall(SYS_capset, &header, data);
}

int fail(int exit_code, const std::string& error) {
  reply_load(false, error);
  return exit_code;
}

size_t current_address_space() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit rl{soft, hard};
  setrlimit(resource, &rl);
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

pid_t g_parent = 0;

// Spins for the device's spin window after the last call, then sleeps on the futex. A sleeping worker wakes
// tens of microseconds late, which a timed call would carry. It wakes once a second to see whether its evaluator
// is still there: one killed outright leaves no one to end the worker.
void wait_for_call(uint32_t expected) {
  auto* c = g_control;
  const uint64_t window_ns = static_cast<uint64_t>(device::spin_window_seconds() * 1e9), start = monotonic_ns();
  for (uint32_t spin = 1; window_ns > 0; ++spin) {
    if (c->go.load(std::memory_order_acquire) == expected) return;
    __builtin_ia32_pause();
    if ((spin & 1023) == 0 && monotonic_ns() - start > window_ns) break;
  }
  while (c->go.load(std::memory_order_acquire) != expected) {
    c->worker_sleeping.store(1, std::memory_order_seq_cst);
    uint32_t seen = c->go.load(std::memory_order_seq_cst);
    const timespec second{1, 0};
    if (seen != expected)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c->go), FUTEX_WAIT, seen, &second, nullptr, 0);
    c->worker_sleeping.store(0, std::memory_order_relaxed);
    if (getppid() != g_parent) _exit(0);
  }
}

}  // namespace

// What loading the candidate needs to read: its library and the files this process has mapped (the worker and the
// libraries the candidate's own may name, which the dynamic linker finds already loaded, by soname).
FileRules loadable_files(const std::string& so_path) {
  FileRules rules;
  rules.read_only.push_back(so_path);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find(" /");
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash + 1);
    if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0) continue;
    if (std::find(rules.read_only.begin(), rules.read_only.end(), path) == rules.read_only.end())
      rules.read_only.push_back(std::move(path));
  }
  return rules;
}

// From the kernel's record of when this process started (clock ticks since boot) to now: 0 if unreadable.
uint32_t microseconds_since_exec() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold anything but a last ')'
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return 0;
  timespec now{};
  clock_gettime(CLOCK_BOOTTIME, &now);
  const double started_s = static_cast<double>(start_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  const double elapsed_s = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) - started_s;
  return elapsed_s > 0 ? static_cast<uint32_t>(elapsed_s * 1e6) : 0;
}

// Gives up root for nobody; the candidate's library is opened first, and loaded through its descriptor.
bool become_nobody() {
  const uid_t id = 65534;
  if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) return false;
  // A changed identity makes the process non-dumpable, which closes /proc/self/fd to it; the evaluator stays
  // non-dumpable, so nothing of its is exposed by this.
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  return true;
}

namespace {

// The candidate loaded into this process: its library and the tensor views for every set.
struct Loaded {
  void* handle = nullptr;
  device::ForwardFn forward = nullptr;
  uint32_t sets = 0, inputs = 0, outputs = 0;
  std::vector<crucible_tensor> tensors;
};

// dlopen and the tensor views, in worker-private memory; false with the reason.
bool load_candidate(const std::string& so_path, const proto::LoadRequest& request, char* tensor_base, Loaded& out,
                    std::string& error) {
  out.handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!out.handle) {
    error = std::string("dlopen: ") + dlerror();
    return false;
  }
  out.forward = reinterpret_cast<device::ForwardFn>(dlsym(out.handle, "crucible_forward"));
  if (!out.forward) {
    error = "crucible_forward not found";
    return false;
  }
  out.sets = request.num_sets, out.inputs = request.num_inputs, out.outputs = request.num_outputs;
  const uint32_t per_set = out.inputs + out.outputs;
  out.tensors.assign(out.sets * per_set, crucible_tensor{});
  for (uint32_t s = 0; s < out.sets; ++s)
    for (uint32_t t = 0; t < per_set; ++t) {
      const auto& d = request.tensors[s][t];
      out.tensors[s * per_set + t] = {tensor_base + d.offset, d.dtype, d.ndim, d.shape, d.strides};
    }
  return true;
}

bool request_is_sane(const proto::LoadRequest& r) {
  return r.magic == proto::kMagic && r.num_sets <= proto::kMaxSets &&
         r.num_inputs + r.num_outputs <= static_cast<uint32_t>(proto::kMaxTensors) &&
         strnlen(r.so_path, sizeof r.so_path) < sizeof r.so_path;
}

// The reset between candidates: the library closed and seen gone, then the device's own checks and self-test.
// The answer goes into the control block; the evaluator checks it, and the process image, from outside.
bool reset(Loaded& loaded, const std::string& so_path, proto::Control* c) {
  std::string why;
  uint64_t checksum = 0;
  c->rc = 0;
  bool ok = dlclose(loaded.handle) == 0;
  if (!ok) why = "dlclose failed";
  // Still known to the dynamic linker (RTLD_NODELETE, a unique symbol): it cannot be unloaded.
  if (ok && dlopen(so_path.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr) {
    ok = false;
    why = "the candidate's library cannot be unloaded";
  }
  loaded = Loaded{};
  if (ok) ok = device::reset_device(c->reset_challenge, checksum, why);
  c->reset_checksum = checksum;
  std::snprintf(c->reset_error, sizeof c->reset_error, "%s", why.c_str());
  c->reset_ok = ok ? 1 : 0;
  return ok;
}

// A later candidate: its request from the socket (no descriptors: the arena stays), which must lend the same arena.
bool next_candidate(const proto::LoadRequest& first, char* tensor_base, proto::LoadRequest& next, Loaded& loaded) {
  if (read(proto::kSocketFd, &next, sizeof next) != static_cast<ssize_t>(sizeof next) || !request_is_sane(next))
    return false;
  if (next.arena_bytes != first.arena_bytes || next.device_arena_bytes != first.device_arena_bytes ||
      std::memcmp(next.device_arena_handle, first.device_arena_handle, sizeof next.device_arena_handle) != 0)
    return reply_load(false, "a reused worker needs the same arena") && false;
  std::string error;
  if (!load_candidate(next.so_path, next, tensor_base, loaded, error)) return reply_load(false, error) && false;
  return reply_load(true, "");
}

// The end of a reusable worker's trusted setup, in two rounds of the doorbell: the device records its state, then the
// evaluator records the process image; both are the baseline every reset must return to.
bool setup_done(uint32_t& seq) {
  auto* c = g_control;
  wait_for_call(seq);
  std::string error;
  const bool ok = device::record_device_baseline(error);
  c->rc = ok ? 0 : 1;
  c->done.store(seq++, std::memory_order_release);
  if (!ok) return false;
  wait_for_call(seq);
  c->rc = 0;
  c->done.store(seq++, std::memory_order_release);
  return true;
}

// Null calls, served by trusted code before any of the candidate's code exists in this process. 0, or the exit code.
int serve_null_calls(uint32_t count, uint32_t& seq) {
  auto* c = g_control;
  for (uint32_t i = 0; i < count; ++i, ++seq) {
    wait_for_call(seq);
    bool usable = device::run_call(nullptr, nullptr, 0, nullptr, 0, c);
    c->done.store(seq, std::memory_order_release);
    if (!usable) return fail(12, std::string("device: ") + c->cuda_error_text);
  }
  return 0;
}

// The worker confined before the candidate's library is loaded: its file rules (built while every path may still be
// opened: as root, the cache directory may be closed to nobody), root given up, its limits, no capabilities, and the
// load-stage filter. `so_path` becomes what the dynamic linker is to open. 0, or the exit code.
int confine(const proto::LoadRequest& request, bool reusable, const device::SyscallNeeds& needs, std::string& so_path) {
  int file_rules = -1;
  if (landlock_abi() > 0) {
    std::string error;
    FileRules rules = loadable_files(request.so_path);
    rules.read_write = device::device_files();
    // A reusable worker's later candidates are copied into the directory of its first (its private one).
    if (reusable) rules.read_only.push_back(std::filesystem::path(request.so_path).parent_path().string());
    file_rules = build_file_rules(rules, error);
    if (file_rules < 0) return fail(15, "cannot confine the worker's files: " + error);
  }
  so_path = request.so_path;
  if (device::drops_identity() && geteuid() == 0) {
    const int so_fd = open(request.so_path, O_RDONLY | O_CLOEXEC);
    if (so_fd < 0) return fail(6, std::string("cannot open the candidate's library: ") + std::strerror(errno));
    if (!become_nobody()) return fail(14, "cannot give up root");
    so_path = "/proc/self/fd/" + std::to_string(so_fd);
  }
  // Limits first (the load-stage filter forbids changing them), generous enough for the library itself.
  if (device::limits_address_space()) {
    rlim_t address_space = current_address_space() + request.memory_limit_bytes + (rlim_t{256} << 20);
    limit(RLIMIT_AS, address_space, address_space);
  }
  // A reusable worker's soft limit is raised from outside for each candidate (no privilege needed below the hard
  // one); SIGXCPU at the soft limit ends it, as no candidate may change that signal's disposition.
  limit(RLIMIT_CPU, request.cpu_seconds, reusable ? RLIM_INFINITY : request.cpu_seconds + 1);
  limit(RLIMIT_FSIZE, 0, 0);
  limit(RLIMIT_NPROC, 0, 0);
  limit(RLIMIT_CORE, 0, 0);
  drop_capabilities();
  if (file_rules >= 0) {
    if (!enter_file_rules(file_rules)) return fail(15, "cannot confine the worker's files (Landlock)");
    close(file_rules);
  }
  if (!install_load_stage_filter(proto::kSocketFd, needs.syscalls, needs.ioctl_fds))
    return fail(5, "cannot install the load-stage seccomp filter");
  return 0;
}

// The candidate's calls, until the evaluator says goodbye (or, for a reusable worker, a reset fails or no next
// candidate comes). Returns the worker's exit code.
int serve_calls(const proto::LoadRequest& first, char* tensor_base, Loaded& loaded, const std::string& so_path,
                bool reusable, uint32_t seq) {
  auto* c = g_control;
  auto next = std::make_unique<proto::LoadRequest>();
  for (;; ++seq) {
    wait_for_call(seq);
    int32_t set = c->set;
    if (set == static_cast<int32_t>(loaded.sets)) {  // a sync: acknowledges that every earlier call has returned
      c->done.store(seq, std::memory_order_release);
      continue;
    }
    if (reusable && set == proto::kResetCall) {
      const bool clean = reset(loaded, next->magic ? next->so_path : so_path, c);
      c->done.store(seq, std::memory_order_release);
      if (!clean || !next_candidate(first, tensor_base, *next, loaded)) return 0;  // the evaluator ends it
      continue;
    }
    if (set < 0 || static_cast<uint32_t>(set) > loaded.sets) return 0;  // the parent's way of saying goodbye
    const uint32_t ni = loaded.inputs, no = loaded.outputs;
    crucible_tensor* in = &loaded.tensors[set * (ni + no)];
    bool usable = device::run_call(loaded.forward, in, static_cast<int32_t>(ni), in + ni, static_cast<int32_t>(no), c);
    c->done.store(seq, std::memory_order_release);
    if (!usable) _exit(13);  // the CUDA context is lost (the error is in the control block): no teardown
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Ended with its evaluator. Not by a parent-death signal: that follows the thread that started the worker, and an
  // evaluator's pool refills from whichever thread evaluates. Before loading, the socket's end tells; after, the
  // check in wait_for_call.
  g_parent = getppid();
  if (g_parent == 1) return 2;
  std::string device_error;
  const bool device_ready = device::start_device(argc, argv, device_error);  // reported in the load reply
  const auto times = device::start_times();
  proto::Hello hello{proto::kMagic, static_cast<int32_t>(getpid()), microseconds_since_exec(), times.context_us,
                     times.profiler_us};
  if (!send_all(&hello, sizeof hello)) return 2;

  auto request = std::make_unique<proto::LoadRequest>();
  int fds[crucible::eval::kMaxPassedFds] = {-1, -1};
  const int fd_count = crucible::eval::receive_with_fds(proto::kSocketFd, request.get(), sizeof *request, fds);
  const int arena_fd = fds[0];
  for (int i = 1; i < fd_count; ++i) close(fds[i]);  // a release page is for Triton workers (queued launches)
  if (fd_count < 1 || !request_is_sane(*request)) return 3;
  const bool reusable = request->reusable != 0;
  if (!device_ready) return fail(10, "device: " + device_error);

  void* base = mmap(nullptr, request->arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
  if (base == MAP_FAILED) return fail(4, std::string("mmap arena: ") + std::strerror(errno));
  close(arena_fd);
  g_control = static_cast<proto::Control*>(base);
  crucible::eval::worker::install_crash_notes(g_control);
  char* tensor_base = device::attach_tensors(*request, static_cast<char*>(base), device_error);
  if (!tensor_base) return fail(11, device_error);

  uint32_t seq = 1;
  if (int rc = serve_null_calls(request->null_calls, seq)) return rc;
  // Read from /proc/self/fd, which the file rules close.
  const device::SyscallNeeds needs = device::syscall_needs();
  // The C and C++ runtime an honest candidate's library may name, mapped before the file rules close the library
  // directories: the dynamic linker then finds them loaded, by soname. (Without this, the CUDA worker on the GPU
  // nodes searched the library directories for a whole-file build's libstdc++.so.6, and Landlock refused them.)
  for (const char* runtime : {"libstdc++.so.6", "libgcc_s.so.1", "libm.so.6"}) dlopen(runtime, RTLD_NOW | RTLD_LOCAL);
  if (reusable && !setup_done(seq)) return fail(16, "device: cannot record its state for reuse");
  std::string so_path;
  if (int rc = confine(*request, reusable, needs, so_path)) return rc;

  Loaded loaded;
  std::string load_error;
  if (!load_candidate(so_path, *request, tensor_base, loaded, load_error)) return fail(6, load_error);
  if (!reply_load(true, "")) return 8;
  if (!reusable) close(proto::kSocketFd);
  const bool sealed = reusable ? install_reuse_stage_filter(proto::kSocketFd, getpid(), needs.syscalls, needs.ioctl_fds)
                               : install_run_stage_filter(getpid(), needs.syscalls, needs.ioctl_fds);
  if (!sealed) return 9;
  return serve_calls(*request, tensor_base, loaded, so_path, reusable, seq);
}

#pragma once
// What the evaluator and its sandboxed worker process share: a fixed-size load request sent over a
// socket (with the arena's descriptor attached), and a control block at the start of the shared tensor arena used as a doorbell for calls.
// The parent times each call from its side of the doorbell, so nothing the candidate does inside its
// own process can alter a measured time.
#include <atomic>
#include <cstdint>

namespace crucible::eval::protocol {

constexpr int kMaxDims = 8;
constexpr int kMaxTensors = 16;  // inputs + outputs of one set
constexpr int kMaxSets = 8;
constexpr uint32_t kMagic = 0x43525543;  // "CRUC"
constexpr int kSocketFd = 3;             // where the worker finds its end of the socket
constexpr uint64_t kControlBytes = 4096;
constexpr int kIpcHandleBytes = 64;     // a cudaIpcMemHandle_t
// A call whose `set` is kNullCall runs the worker's own timing path around no candidate at all (only before
// the candidate is loaded): the evaluator learns the fixed cost of a call from trusted code.
constexpr int32_t kNullCall = 1000;
// A call whose `set` is kResetCall asks a reusable worker (LoadRequest::reusable) to unload its candidate and prove
// itself clean (docs/cuda.md, "Reusing a worker"): the report lands in the control block, and the worker then reads
// the next LoadRequest from its socket. A call whose `set` is kSetupDoneCall lets a reusable worker go on from its
// trusted setup to loading the candidate, once the evaluator has recorded the process image as it is then.
constexpr int32_t kResetCall = 2000;
constexpr int32_t kSetupDoneCall = 2001;
// rc of a call that ended in a CUDA error; the worker has written the error into the control block and exits.
constexpr int32_t kDeviceErrorRc = -1000001;
// A Python worker refused the call with a classified reason (a KernelBench ModelNew whose forward did no custom
// work, returned the wrong shapes or raised): "code: detail" is in cuda_error_text.
constexpr int32_t kRefusalRc = -1000002;

struct TensorDesc {
  int32_t dtype;
  int32_t ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  uint64_t offset;  // from the arena base
};

struct LoadRequest {
  uint32_t magic;
  uint32_t num_sets;
  uint32_t num_inputs;
  uint32_t num_outputs;
  uint64_t arena_bytes;
  uint64_t memory_limit_bytes;  // address space the candidate may add beyond what is mapped at load
  uint32_t cpu_seconds;
  char so_path[4096];
  // CUDA workers only: tensor offsets are into device memory shared by the evaluator through this handle.
  int32_t cuda_device;  // -1 for CPU workers
  uint32_t null_calls;  // served before the candidate is loaded (see kNullCall)
  // The evaluator may hand this worker further candidates after a verified reset (see kResetCall): it keeps its
  // socket and reads later requests from it. Later requests carry no descriptor (the arena stays mapped).
  uint32_t reusable;
  uint64_t device_arena_bytes;
  uint8_t device_arena_handle[kIpcHandleBytes];
  TensorDesc tensors[kMaxSets][kMaxTensors];  // inputs first, then outputs
};

struct LoadReply {
  uint32_t magic;
  int32_t ok;            // 1 when the candidate is loaded and the sandbox is sealed
  char error[1024];
};

// Sent once the worker is ready to load, with how long getting ready took (microseconds; 0 where not measured):
// its whole start (from exec), and of that its device's context and its profiler.
struct Hello {
  uint32_t magic;
  int32_t pid;
  uint32_t start_us, context_us, profiler_us;
};

// Lives at arena offset 0. Sequence numbers only grow; the worker sleeps on `go` via futex when idle.
struct Control {
  alignas(64) std::atomic<uint32_t> go;
  std::atomic<uint32_t> worker_sleeping;
  int32_t set;  // which input/output set the requested call uses
  int32_t profile;  // CUDA workers: measure the call's kernel coverage (slower: not for timed calls)
  alignas(64) std::atomic<uint32_t> done;
  int32_t rc;
  alignas(64) std::atomic<int32_t> crash_signal;  // written by the worker's fatal-signal handler
  int32_t crash_code;
  int32_t crash_origin;  // the signal's si_code: SYS_SECCOMP (1) for the sandbox's refusal, <= 0 when sent by a process
  uint64_t crash_address;
  // CUDA workers: the last call's device time by events on the candidate's stream (written by the worker, so
  // only a hint: the evaluator never lets it make a call look faster than its own clock allows), and the
  // CUDA error that ended the worker.
  alignas(64) float device_ms;
  uint64_t seen_ns, launched_ns, synced_ns;
  float own_kernel_share;  // of a profiled call's GPU time, in the candidate's own kernels; -1 unknown (a hint)  // CLOCK_MONOTONIC in the worker: where a call's time went (diagnostics)
  int32_t cuda_error;
  char cuda_error_text[256];
  // Queued launches (GPU workers, docs/cuda.md): when `hold` is set, the worker makes its streams wait for the
  // release page before it calls the candidate, and writes the call's sequence number into `launched` once the
  // candidate has returned; the evaluator then releases the GPU and starts its clock. `hold_ready`: the worker
  // could map the release page for its GPU (otherwise every call runs as it is launched).
  alignas(64) std::atomic<uint32_t> launched;
  int32_t hold;
  int32_t hold_ready;
  // Reset (kResetCall): the evaluator's challenge for the worker's self-test, and the worker's report. The report
  // is only the worker's word: the evaluator checks the checksum against its own computation and the process image
  // from outside (worker_image.h).
  alignas(64) uint64_t reset_challenge;
  uint64_t reset_checksum;
  int32_t reset_ok;
  char reset_error[256];
};
static_assert(sizeof(Control) <= kControlBytes, "control block must fit its page");

// The release page: one word the evaluator writes (the sequence number of the call the GPU may start) and the
// worker's GPU reads. It travels as a second descriptor with the load request, opened read-only, so nothing in the
// worker's process can release its own GPU early.
constexpr uint64_t kReleaseBytes = 4096;
struct ReleasePage {
  alignas(64) std::atomic<uint32_t> release;
};

}  // namespace crucible::eval::protocol

#pragma once
// What the decode kernels share: rounding as LibTorch rounds, early launch, and the launch itself. Functions, not
// copies per file: early launch is switched for every kernel at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "lm/kernels/decode_kernels_launch.h"
#include "lm/kernels/kernel_switch.h"

namespace crucible::lm::kernels {


// Every product and sum is rounded to the element type on its own (no fused multiply-add), as LibTorch's separate
// element-wise kernels round them.
inline __device__ float widen(float x) { return x; }
inline __device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
inline __device__ float widen(__half x) { return __half2float(x); }
template <typename T> __device__ T narrow(float x);
template <> inline __device__ float narrow<float>(float x) { return x; }
template <> inline __device__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> inline __device__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <typename T> __device__ T mul(T a, T b) { return narrow<T>(__fmul_rn(widen(a), widen(b))); }
template <typename T> __device__ T add(T a, T b) { return narrow<T>(__fadd_rn(widen(a), widen(b))); }

// Element d of a head rotated: x * cos + rotate_half(x) * sin, `partner` the element rotate_half pairs with x (the
// sign in signed_sin), each product and the sum rounded to T as LibTorch's elementwise operators round them.
template <typename T> __device__ T rotated(T x, T partner, T cos, T signed_sin) {
  return add(mul(x, cos), mul(partner, signed_sin));
}

// Row b's rotary rows of `cos` and `signed_sin` ([table_rows, D]) at its position; a device error outside the tables.
template <typename T>
__device__ __forceinline__ void rotary_rows_of(const RotaryRows& r, int64_t b, int D, const T*& cos, const T*& sin) {
  const int64_t position = r.positions[b * r.position_stride];
  if (position < 0 || position >= r.table_rows) __trap();
  cos = static_cast<const T*>(r.cos) + position * D;
  sin = static_cast<const T*>(r.signed_sin) + position * D;
}

// Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel before it
// on the stream finishes, so that its launch, and its loads of what no earlier kernel writes (weights), overlap that
// kernel. Every kernel here therefore waits for the earlier kernels before it reads or writes anything else, and lets
// the next kernel start once it is past that wait: one kernel ahead, not a cascade of waiting ones. So when a kernel
// starts, every kernel before the one just before it has finished. Without the launch attribute (older GPUs,
// CRUCIBLE_DECODE_PDL=0) the wait returns at once.
__device__ __forceinline__ void wait_for_earlier_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void let_later_kernels_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline std::atomic<bool>& early_launch_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_PDL")};
  return on;
}

// The current GPU's compute capability, SM count and shared memory a block may opt in to, asked once per GPU.
struct GpuFacts {
  int major = 0, sms = 0, shared_optin = 0;
};

inline GpuFacts current_gpu() {
  constexpr int kGpus = 64;
  static std::atomic<int> majors[kGpus] = {}, sms[kGpus] = {}, shared[kGpus] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kGpus) return {};
  GpuFacts facts;
  facts.major = majors[device].load(std::memory_order_acquire);  // set after the others: a major seen means they are
  facts.sms = sms[device].load(std::memory_order_relaxed);
  facts.shared_optin = shared[device].load(std::memory_order_relaxed);
  if (facts.major == 0) {
    if (cudaDeviceGetAttribute(&facts.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&facts.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&facts.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return {};
    sms[device].store(facts.sms, std::memory_order_relaxed);
    shared[device].store(facts.shared_optin, std::memory_order_relaxed);
    majors[device].store(facts.major, std::memory_order_release);
  }
  return facts;
}

// Whether `kernel` runs code built for compute capability 9.0 or later (with the wait and the trigger): a build for
// older GPUs only, run on a Hopper from its PTX, has neither, and must not be launched early.
inline bool has_early_launch_code(const void* kernel) {
  static std::mutex mutex;
  static std::unordered_map<const void*, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(kernel);
  if (found != known.end()) return found->second;
  cudaFuncAttributes attributes;
  const bool has = cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess && attributes.ptxVersion >= 90;
  known.emplace(kernel, has);
  return has;
}

// A launch with the early start where the kernel has its code, and blocks in clusters of `cluster` along x where that
// is not 0 (compute capability 9.0: the kernel must have code for it, which the caller checks).
template <typename... Params, typename... Args>
bool launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster, size_t shared,
                      cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (early_launch_on().load(std::memory_order_relaxed) && current_gpu().major >= 9 &&
      has_early_launch_code(reinterpret_cast<const void*>(kernel))) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess;
}

template <typename... Params, typename... Args>
bool launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const Args&... args) {
  return launch_clustered(kernel, grid, block, 0, shared, stream, args...);
}

// `launch` called with a value of the element type `e` names; false for none.
template <typename Launch>
inline bool by_element(Element e, Launch launch) {
  switch (e) {
    case Element::f32: return launch(float{});
    case Element::bf16: return launch(__nv_bfloat16{});
    case Element::f16: return launch(__half{});
  }
  return false;
}

template <typename T, int N>
__device__ void widen_all(const uint4& raw, float (&out)[N]) {
  static_assert(N * sizeof(T) == 16, "16-byte loads");
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = widen(e[i]);
}

}  // namespace crucible::lm::kernels

// Diagnostic: how fast the grid of one token's first expert projection at gpt-oss-120b (1,440 one-warp blocks, each
// 16 consecutive rows of 1,440 bytes of MXFP4 codes: 33.2 MB a launch) can read its codes with no arithmetic: by each
// lane's ring of 16-byte cp.async copies (expert_warps.cu's rings), by bulk copies of each row's 4 spans
// (bulk_copy.cuh), and by a plain grid-stride stream. 30 sets of codes are read in turn, so L2 holds none.
// Prints microseconds a launch, launch gaps included (docs/benchmarks.md, gpt-oss decode).
// Usage: nvcc -std=c++17 -O3 -arch=sm_90 -o expert_read_probe tools/gpu_node/expert_read_probe.cu
//        ./expert_read_probe
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kRowBytes = 1440, kRows = 16, kWarps = 1440, kSets = 30;
constexpr size_t kSetBytes = size_t(kWarps) * kRows * kRowBytes;

__device__ __forceinline__ uint32_t saddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// A: lane (g, t) copies rows g and g + 8, 16-byte block t of each 64-byte span, into its ring of S stages.
template <int S>
__global__ void __launch_bounds__(32) ring_kernel(const uint8_t* codes, unsigned* out) {
  extern __shared__ uint4 ring[];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const uint8_t* base = codes + size_t(blockIdx.x) * kRows * kRowBytes;
  const uint8_t* low = base + g * kRowBytes + t * 16;
  const uint8_t* high = base + (g + 8) * kRowBytes + t * 16;
  auto copy = [&](int span, int stage) {
    const bool here = span * 64 + t * 16 < kRowBytes;
    uint4* to = ring + stage * 64 + lane * 2;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr(to)), "l"(low + span * 64),
                 "r"(here ? 16 : 0));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr(to + 1)), "l"(high + span * 64),
                 "r"(here ? 16 : 0));
    asm volatile("cp.async.commit_group;");
  };
  for (int s = 0; s < S - 1; ++s) copy(s, s);
  unsigned acc = 0;
  for (int span = 0; span < 23; ++span) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 2));
    copy(span + S - 1, (span + S - 1) % S);
    const uint4 a = ring[(span % S) * 64 + lane * 2], b = ring[(span % S) * 64 + lane * 2 + 1];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
  }
  asm volatile("cp.async.wait_group 0;");
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

// B: a warp's rows in chunks of C bytes a row by bulk copies (lane r < 16 copies row r's chunk), S stages, an
// mbarrier a stage; each lane then reads its 2 rows' blocks of the chunk's spans.
template <int S, int C>
__global__ void __launch_bounds__(32) bulk_kernel(const uint8_t* codes, unsigned* out) {
  constexpr int kPitch = C + 64;  // rows 64 bytes apart in banks
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint8_t* stages = smem + 128;
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const uint8_t* base = codes + size_t(blockIdx.x) * kRows * kRowBytes;
  constexpr int kChunks = (kRowBytes + C - 1) / C;
  if (lane < S) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bars + lane)));
  asm volatile("fence.mbarrier_init.release.cluster;");
  __syncwarp();
  auto issue = [&](int chunk) {
    if (chunk >= kChunks) return;
    const int stage = chunk % S;
    const int bytes = min(C, kRowBytes - chunk * C);
    if (lane == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bars + stage)),
                   "r"(bytes * kRows)
                   : "memory");
    __syncwarp();
    if (lane < kRows)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(saddr(stages + stage * kRows * kPitch + lane * kPitch)),
                   "l"(base + lane * kRowBytes + chunk * C), "r"(bytes), "r"(saddr(bars + stage))
                   : "memory");
  };
  for (int c = 0; c < S; ++c) issue(c);
  unsigned acc = 0;
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    const int stage = chunk % S;
    const uint32_t parity = (chunk / S) & 1;
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(saddr(bars + stage)), "r"(parity) : "memory");
    const int bytes = min(C, kRowBytes - chunk * C);
    const uint8_t* st = stages + stage * kRows * kPitch;
    for (int span = 0; span * 64 < bytes; ++span) {
      if (span * 64 + t * 16 >= bytes) continue;
      const uint4 a = *reinterpret_cast<const uint4*>(st + g * kPitch + span * 64 + t * 16);
      const uint4 b = *reinterpret_cast<const uint4*>(st + (g + 8) * kPitch + span * 64 + t * 16);
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    }
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    issue(chunk + S);
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(32) empty_kernel(unsigned* out) {
  if (out && threadIdx.x == 999) out[0] = 1;
}

__global__ void stream_kernel(const uint4* codes, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(codes + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <typename F>
float time_us(F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  for (int i = 0; i < 30; ++i) launch(i % kSets);
  cudaEventRecord(a);
  for (int i = 0; i < 300; ++i) launch(i % kSets);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
  return ms * 1000 / 300;
}

template <int S>
void ring(const uint8_t* codes, unsigned* out) {
  const int smem = S * 64 * 16;
  cudaFuncSetAttribute(ring_kernel<S>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  printf("cp.async ring, %d stages of a span: %.1f us\n", S,
         time_us([&](int s) { ring_kernel<S><<<kWarps, 32, smem>>>(codes + s * kSetBytes, out); }));
}

template <int S, int C>
void bulk(const uint8_t* codes, unsigned* out) {
  const int smem = 128 + S * kRows * (C + 64);
  cudaFuncSetAttribute(bulk_kernel<S, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(bulk_kernel<S, C>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  printf("bulk copies, %d stages of %d bytes a row (%d B shared a warp): %.1f us\n", S, C, smem,
         time_us([&](int s) { bulk_kernel<S, C><<<kWarps, 32, smem>>>(codes + s * kSetBytes, out); }));
}

int main() {
  uint8_t* codes;
  unsigned* out;
  cudaMalloc(&codes, kSets * kSetBytes);
  cudaMemset(codes, 1, kSets * kSetBytes);
  cudaMalloc(&out, kWarps * sizeof(unsigned));
  ring<3>(codes, out);
  ring<6>(codes, out);
  bulk<2, 256>(codes, out);
  bulk<3, 256>(codes, out);
  bulk<2, 480>(codes, out);
  bulk<2, 736>(codes, out);
  bulk<4, 128>(codes, out);
  for (int blocks : {528, 1056})
    printf("grid-stride stream, %d blocks of 256: %.1f us\n", blocks, time_us([&](int s) {
             stream_kernel<<<blocks, 256>>>(reinterpret_cast<const uint4*>(codes + s * kSetBytes), kSetBytes / 16, out);
           }));
  printf("empty launch of the grid: %.1f us\n", time_us([&](int) { empty_kernel<<<kWarps, 32>>>(out); }));
  return 0;
}

// A one-row step's router in one kernel: the residual row RMS-normalised, its logits over the experts, and their top
// k. Where a batch-1 decode step ran the router's one-row linear kernel and then the top-k kernel, each a chain of a
// wait, loads from L2 and reductions, this runs one chain: a cluster of blocks, each holding its share of the
// router's rows in shared memory (copied before the wait for the kernel before, as no kernel writes them), writes its
// logits into the first block's shared memory, which takes their top k.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/async_copy.cuh"
#include "lm/kernels/moe_device.cuh"

namespace crucible::lm::kernels {
namespace {

constexpr int kRouteWarps = 4;  // stage_normed's sums in the one-row linear kernel's order (kLinearWarps)

template <typename T>
__global__ void __launch_bounds__(kRouteWarps * 32) route_row_kernel(RouteRowArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int V = 16 / sizeof(T);
  const auto cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int slices = a.in_features / V, rows = (a.experts + kRouteRowBlocks - 1) / kRouteRowBlocks;  // route_row_rows
  const int first = rank * rows, mine = max(0, min(rows, a.experts - first));
  extern __shared__ uint4 shared[];  // this block's rows of the router, then the normalised row
  uint4* weights = shared;
  uint4* normed = shared + rows * slices;
  __shared__ float logits[kMaxRouteExperts];  // the first block's: every block's logits, rounded to T
  __shared__ float reduced[kRouteWarps];
  // Another block's shared memory may be written only once it runs: each block says it does here, and waits for
  // the others before its first such write.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  const uint4* router = static_cast<const uint4*>(a.router) + static_cast<int64_t>(first) * slices;
  for (int i = threadIdx.x; i < mine * slices; i += blockDim.x)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(weights + i)), "l"(router + i));
  commit_copies();
  wait_for_earlier_kernels();
  let_later_kernels_start();
  stage_normed<T, kRouteWarps>(a.x, a.norm_weight, a.in_features, a.eps, normed, reduced);
  if (rank == 0)
    for (int i = threadIdx.x; i < slices; i += blockDim.x) static_cast<uint4*>(a.normed_out)[i] = normed[i];
  wait_copies<0>();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* first_logits = cluster.map_shared_rank(logits, 0);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  for (int r = warp; r < mine; r += kRouteWarps) {
    float acc = 0.0f;
    for (int c = lane; c < slices; c += 32) {
      float w[V], x[V];
      widen_all<T>(weights[r * slices + c], w);
      widen_all<T>(normed[c], x);
#pragma unroll
      for (int i = 0; i < V; ++i) acc = fmaf(w[i], x[i], acc);
    }
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {  // as the linear layer rounds: the sum and its bias, once
      const int e = first + r;
      const T logit = narrow<T>(a.bias ? acc + widen(static_cast<const T*>(a.bias)[e]) : acc);
      static_cast<T*>(a.logits)[e] = logit;
      first_logits[e] = widen(logit);
    }
  }
  cluster.sync();  // every logit is in the first block's shared memory
  if (rank != 0 || warp != 0) return;
  const TopK top = warp_top_k(logits, Element::f32, a.experts, a.k);
  if (lane == 0) top.write(a.chosen, a.weights, 0, a.element, a.k);
#endif
}

template <typename T>
bool launch_route_row_as(const RouteRowArgs& a, cudaStream_t stream) {
  const auto kernel = route_row_kernel<T>;
  const size_t shared = route_row_shared_bytes(a.experts, a.in_features, a.element);
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)) !=
      cudaSuccess)
    return false;
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = kRouteRowBlocks;
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kRouteRowBlocks);
  config.blockDim = dim3(kRouteWarps * 32);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = early_launch_on().load(std::memory_order_relaxed) ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, a) == cudaSuccess;
}

}  // namespace

bool route_row_takes(int experts, int64_t in_features, int k, Element element) {
  const GpuFacts gpu = current_gpu();
  return gpu.major >= 9 && element != Element::f32 && experts > 0 && experts <= kMaxRouteExperts && k > 0 &&
         k <= kMaxRouteK && k <= experts && in_features > 0 && in_features * element_bytes(element) % 16 == 0 &&
         static_cast<int64_t>(route_row_shared_bytes(experts, in_features, element)) <= gpu.shared_optin;
}

bool launch_route_row(const RouteRowArgs& a, cudaStream_t stream) {
  if (!route_row_takes(a.experts, a.in_features, a.k, a.element)) return false;
  return a.element == Element::bf16 ? launch_route_row_as<__nv_bfloat16>(a, stream)
                                    : launch_route_row_as<__half>(a, stream);
}

}  // namespace crucible::lm::kernels

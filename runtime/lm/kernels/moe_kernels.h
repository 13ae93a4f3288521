#pragma once
// The experts of a mixture of experts read straight from MXFP4 on CUDA, in passes without gradients (decode steps,
// prefills, log-prob passes): no expert is expanded to the model dtype, and the experts each token chose are found on
// the device, so a step needs no host synchronisation. Sums in float32: within rounding of decoding each expert and
// multiplying with LibTorch's linear, not its bits.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <utility>

namespace crucible::lm {

// How expert_gemv multiplies: float32 products on CUDA cores (within float32 rounding of the decoded experts), or the
// inputs rounded to bfloat16 and multiplied on tensor cores, float32 sums: a bfloat16 model's precision, as its
// linear layers multiply, and several times faster for steps of many tokens.
enum class ExpertProducts { float32, bfloat16 };

// Whether expert_gemv takes `assignments` (tokens x experts per token) of `x` against these packed experts: a CUDA
// LibTorch build, x on a GPU in float32, bfloat16 or float16 with no gradient recorded, blocks and scales contiguous
// uint8 on its device, up to 256 assignments (any number with bfloat16 products), and not switched off.
bool expert_gemv_serves(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& scales, int64_t assignments,
                        ExpertProducts products);

// Switches the kernel off and back on (tests and benchmarks compare both ways). CRUCIBLE_MOE_KERNELS=0 starts off.
void set_expert_kernels(bool on);
// Assignments a block of the ordered tensor-core kernel takes (long passes: prefills, log-probs): 32, 64 (which reads
// and decodes each expert's codes half as often), or 0: chosen a pass, 64 where experts have more than 256 each on
// average (the default; CRUCIBLE_MOE_ORDERED_TILE=32 or 64 starts with that tile). Throws for other values.
void set_expert_ordered_tile(int tile);


// The products for a model computing in `dtype` on x's GPU: bfloat16 for a bfloat16 model on compute capability 8.0
// or later unless switched off (set_expert_tensor_cores; CRUCIBLE_MOE_TENSOR_CORES=0 starts off), else float32.
ExpertProducts expert_products_for(const at::Tensor& x, c10::ScalarType dtype);
void set_expert_tensor_cores(bool on);

// x [rows, cols] (cols contiguous), experts [A] int64 on x's device, blocks [E, out, cols / 32, 16] (codes in the
// paired order, mxfp4.h) and scales [E, out, cols / 32] uint8, bias [E, out] or undefined -> [A, out] float32: row a is x[a / x_divisor] times expert
// experts[a]'s matrix, plus its bias. bfloat16 products take x in bfloat16 or float32.
// Assignments in their experts' order, which the tensor cores take for steps of more than 256 (found on the device:
// no host synchronisation): expert e's at order[offsets[e] .. offsets[e + 1]), int32. Both projections of a step
// share one. Empty where expert_gemv would not use it.
struct ExpertOrder {
  at::Tensor order, offsets;
};
ExpertOrder expert_order_for(const at::Tensor& experts, int64_t experts_count, ExpertProducts products);

// `order` (may be null or empty: made here when needed) is expert_order_for(experts, E, products).
at::Tensor expert_gemv(const at::Tensor& x, int64_t x_divisor, const at::Tensor& experts, const at::Tensor& blocks,
                       const at::Tensor& scales, const at::Tensor& bias,
                       ExpertProducts products = ExpertProducts::float32, const ExpertOrder* order = nullptr);

// The layer's glue kernels folded into the experts' kernel (bfloat16 products), one launch fewer each, the same values:
// the first projection's clamped SwiGLU, and for one token the weighted sum of its experts' second projections
// (on compute capability 9.0, its k <= 8 blocks of a row block meeting in a cluster). CRUCIBLE_MOE_EPILOGUES=0 starts
// off.
bool expert_epilogues_serve(ExpertProducts products);
void set_expert_epilogues(bool on);

// Whether one token's first projection (bfloat16 products, a warp per 16 rows of an expert) brings these experts'
// codes and scales by bulk copies rather than each lane's ring of copies: the same products, bit for bit. On compute
// capability 9.0, codes and scales 16-byte aligned, rows a multiple of 16. CRUCIBLE_MOE_BULK=0 starts off.
bool expert_bulk_copies_serve(const at::Tensor& blocks, const at::Tensor& scales);
void set_expert_bulk_copies(bool on);

// gpt-oss's SwiGLU clamp: its limit and the sigmoid's alpha.
struct SwigluClamp {
  double limit, alpha;
};

// clamped_swiglu_on_device(expert_gemv(...bfloat16 products...), clamp, bfloat16) in one launch: blocks' rows
// alternate gate, linear -> [A, out / 2] bfloat16.
at::Tensor expert_gemv_swiglu(const at::Tensor& x, int64_t x_divisor, const at::Tensor& experts,
                              const at::Tensor& blocks, const at::Tensor& scales, const at::Tensor& bias,
                              const SwigluClamp& clamp, const ExpertOrder* order = nullptr);

// Whether expert_gemv_summed takes a step of `tokens` tokens with k experts each: epilogues serve, one token, k at
// most 8 and no more than the experts, on a GPU of compute capability 9.0 or later (x's).
bool expert_sum_fuses(const at::Tensor& x, int64_t tokens, int64_t k, int64_t experts_count, ExpertProducts products);

// weighted_expert_sum(expert_gemv(x, 1, ...bfloat16 products...), weights, dtype, residual) for one token's k
// assignments (different experts, as a router's top-k chooses them; weights [1, k]), in one launch -> [1, out] in
// dtype. The experts must not come from the kernel launched just before it (x, weights and residual may): its blocks
// read them, and start copying the experts' weights, while that kernel still runs.
at::Tensor expert_gemv_summed(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& blocks,
                              const at::Tensor& scales, const at::Tensor& bias, const at::Tensor& weights,
                              c10::ScalarType dtype, const at::Tensor& residual = {});

// MXFP4 decoded on the GPU in one kernel, mxfp4_decode's values (LibTorch's way is a table lookup and four more
// kernels, about 0.15 ms for one of gpt-oss's 5760 x 2880 experts): blocks [..., n, 16] (codes in the paired order)
// and scales [..., n] contiguous uint8 on a GPU, to bfloat16 or float32, unless the expert kernels are switched off.
bool mxfp4_decode_serves(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype);
at::Tensor mxfp4_decode_on_device(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype);

// A router's top k on the GPU in one kernel (LibTorch's top-k is a select, a sort and a softmax): logits [N, E] on a
// GPU in float32, bfloat16 or float16, E <= 256, k <= 8, and not switched off (CRUCIBLE_ROUTE_KERNEL=0 starts off).
// Equal logits rank by the lower index, where LibTorch's top-k leaves their order open: routing that goes through
// here on a GPU (sampling and training alike) sees one order.
bool route_kernel_serves(const at::Tensor& logits, int64_t k);
void set_route_kernel(bool on);

// -> experts [N, k] int64, largest logit first, and their softmax [N, k] in the logits' dtype (no gradient).
std::pair<at::Tensor, at::Tensor> route_top_k(const at::Tensor& logits, int64_t k);

// The glue of a device step around expert_gemv, one kernel each instead of LibTorch's five and three (a decode step
// is mostly small kernels): gpt-oss's clamped SwiGLU of the first projection's float32 output [A, 2 I] -> [A, I] in
// `dtype` (clamped_swiglu in moe.h, same operations and order, rounded once: bfloat16 for the tensor cores' second
// projection), and the experts' outputs [N * k, hidden] float32 weighted by the routing weights [N, k] and summed per
// token -> [N, hidden] in `dtype`, plus `residual` ([N, hidden] in `dtype`) where given, rounded as LibTorch rounds
// the sum and then the addition. CUDA tensors, contiguous.
at::Tensor clamped_swiglu_on_device(const at::Tensor& gate_up, double limit, double alpha,
                                    c10::ScalarType dtype = c10::ScalarType::Float);
at::Tensor weighted_expert_sum(const at::Tensor& experts_out, const at::Tensor& weights, c10::ScalarType dtype,
                               const at::Tensor& residual = {});

}  // namespace crucible::lm

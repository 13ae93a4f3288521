#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <cstring>

#include "lm/kernels/decode_kernels.h"
#include "lm/kernels/kernel_switch.h"
#include "lm/kernels/element_of.h"
#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm {
namespace {

std::atomic<bool>& switched_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_KERNELS")};
  return on;
}

// Where decode steps use the attention kernels. The split kernels beat cuDNN's attention (which reads the graph's
// whole span) when few rows and key heads leave most of the GPU idle, and lose to it on large batches
// (docs/benchmarks.md, "Decode attention kernels"): by default they serve batches up to kAttentionMaxRowsTimesKvHeads,
// and the tensor-core kernel those above, where it takes the heads, and small batches of enough key heads too.
enum class AttentionUse { off, small_batches, always };
constexpr int64_t kAttentionMaxRowsTimesKvHeads = 32;

AttentionUse attention_use_from_environment() {
  const char* value = std::getenv("CRUCIBLE_DECODE_ATTENTION");  // 0: never, 1: every batch, unset: small batches
  if (value && std::strcmp(value, "0") == 0) return AttentionUse::off;
  if (value && std::strcmp(value, "1") == 0) return AttentionUse::always;
  return AttentionUse::small_batches;
}

std::atomic<AttentionUse>& attention_use() {
  static std::atomic<AttentionUse> use{attention_use_from_environment()};
  return use;
}

// The tensor-core kernel serves the batches above kAttentionMaxRowsTimesKvHeads where it takes the heads (16-bit
// caches, D = 64 or 128), instead of cuDNN's attention (or the split kernels, with CRUCIBLE_DECODE_ATTENTION=1), and
// the smaller ones of small_batch_tensor_core_blocks() or more. CRUCIBLE_DECODE_ATTENTION_TC=0 starts it off.
std::atomic<bool>& tensor_core_attention_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_ATTENTION_TC")};
  return on;
}

// The step's rotation folded into the tensor-core attention kernel. CRUCIBLE_DECODE_ROTATION_FOLD=0 starts it off.
std::atomic<bool>& rotation_fold_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_ROTATION_FOLD")};
  return on;
}

std::atomic<bool>& fused_sampling_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_SAMPLER")};
  return on;
}

std::atomic<bool>& small_linear_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_GEMV")};
  return on;
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

cudaStream_t stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

bool large_batch(const at::Tensor& k_cache) { return k_cache.size(0) * k_cache.size(1) > kAttentionMaxRowsTimesKvHeads; }

// Small batches attend on the tensor-core kernel too where they give it at least this many blocks (rows x key heads):
// from 4 blocks on (Qwen2.5-7B at batch 1; gpt-oss's 8 key heads at every cache length measured, up to 16,384 slots)
// it finished sooner than the split kernels and their combine (docs/benchmarks.md, "Decode attention kernels").
// CRUCIBLE_DECODE_ATTENTION_TC_FROM sets it.
int64_t small_batch_tensor_core_blocks() {
  static const int64_t blocks = [] {
    const char* value = std::getenv("CRUCIBLE_DECODE_ATTENTION_TC_FROM");
    return value ? std::max<int64_t>(1, std::atoll(value)) : int64_t{4};
  }();
  return blocks;
}

bool tensor_cores_attend(const at::Tensor& k_cache, int64_t heads) {
  return tensor_core_attention_on().load(std::memory_order_relaxed) &&
         k_cache.size(0) * k_cache.size(1) >= small_batch_tensor_core_blocks() &&
         kernels::attention_tensor_cores_take(static_cast<int>(heads), static_cast<int>(k_cache.size(1)),
                                              static_cast<int>(k_cache.size(3)), element_of(k_cache),
                                              k_cache.size(2));
}

}  // namespace

bool decode_kernels_serve(const at::Tensor& x) {
  if (!switched_on().load(std::memory_order_relaxed) || !x.is_cuda() || at::GradMode::is_enabled()) return false;
  const auto t = x.scalar_type();
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool rotate_into_cache_serves(const at::Tensor& x, int64_t head_dim, bool normalised_heads) {
  return decode_kernels_serve(x) && kernels::rotation_takes(head_dim, normalised_heads);
}

void set_decode_kernels(bool on) { switched_on().store(on); }

bool decode_attention_takes(const at::Tensor& k_cache, int64_t heads) {
  return decode_kernels_serve(k_cache) && k_cache.dim() == 4 && k_cache.is_contiguous() && aligned16(k_cache) &&
         kernels::attention_takes(static_cast<int>(heads), static_cast<int>(k_cache.size(1)),
                                  static_cast<int>(k_cache.size(3)), element_of(k_cache)) &&
         k_cache.size(2) <= static_cast<int64_t>(kernels::attention_chunk(static_cast<int>(k_cache.size(3)),
                                                                          element_of(k_cache),
                                                                          kernels::kAttentionFewRounds)) *
                                kernels::kAttentionMaxSplits;
}

bool decode_attention_serves(const at::Tensor& k_cache, int64_t heads) {
  const auto use = attention_use().load(std::memory_order_relaxed);
  if (use == AttentionUse::off || !decode_attention_takes(k_cache, heads)) return false;
  return use == AttentionUse::always || !large_batch(k_cache) || decode_attention_on_tensor_cores(k_cache, heads);
}

bool decode_attention_serves_sinks(const at::Tensor& k_cache, int64_t heads) {
  return attention_use().load(std::memory_order_relaxed) != AttentionUse::off && decode_attention_takes(k_cache, heads);
}

void set_decode_attention(bool on) { attention_use().store(on ? AttentionUse::small_batches : AttentionUse::off); }

bool decode_attention_on_tensor_cores(const at::Tensor& k_cache, int64_t heads) {
  if (!decode_attention_takes(k_cache, heads)) return false;
  const c10::cuda::CUDAGuard on_its_device(k_cache.device());
  return tensor_cores_attend(k_cache, heads);
}

void set_decode_attention_tensor_cores(bool on) { tensor_core_attention_on().store(on); }

bool small_linear_serves(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const at::Tensor& residual, const LinearFolds& folds) {
  if (!small_linear_on().load(std::memory_order_relaxed) || !decode_kernels_serve(x) || x.dim() < 1 ||
      weight.dim() != 2 || weight.scalar_type() != x.scalar_type() || weight.device() != x.device() ||
      !weight.is_contiguous() || !x.is_contiguous() || x.size(-1) != weight.size(1))
    return false;
  const int64_t K = weight.size(1), rows = weight.size(0);
  if (folds.gated && (rows % 2 != 0 || residual.defined())) return false;
  const auto alike = [&](const at::Tensor& t, int64_t n) {
    return t.scalar_type() == x.scalar_type() && t.device() == x.device() && t.is_contiguous() && t.numel() == n;
  };
  if ((bias.defined() && !alike(bias, rows)) || (residual.defined() && !alike(residual, rows))) return false;
  if (folds.norm_weight.defined() && !(alike(folds.norm_weight, K) && aligned16(folds.norm_weight))) return false;
  // The normalised row is written while other blocks still read x: never over it.
  if (folds.normed_out.defined() &&
      !(folds.norm_weight.defined() && alike(folds.normed_out, K) && aligned16(folds.normed_out) &&
        !folds.normed_out.is_alias_of(x)))
    return false;
  return aligned16(x) && aligned16(weight) && x.numel() == K &&
         kernels::small_linear_takes(K, element_of(x), folds.norm_weight.defined());
}

void set_small_linear(bool on) { small_linear_on().store(on); }

void set_early_launch(bool on) { kernels::allow_early_launch(on); }

void set_small_linear_ahead(bool on) { kernels::allow_rows_ahead(on); }

at::Tensor small_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        const at::Tensor& residual, const LinearFolds& folds) {
  TORCH_CHECK(small_linear_serves(x, weight, bias, residual, folds), "small_linear: inputs the kernel does not take");
  const int64_t K = weight.size(1), N = folds.gated ? weight.size(0) / 2 : weight.size(0);
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  // small_linear_serves checked the bias's, residual's and norm weight's dtype, device, layout and size; the
  // residual's shape is the result's.
  TORCH_CHECK(!residual.defined() || residual.sizes() == at::IntArrayRef(sizes),
              "small_linear: residual shaped as the result");
  const c10::cuda::CUDAGuard on_its_device(x.device());
  auto out = at::empty(sizes, x.options());
  kernels::LinearArgs a;
  a.x = x.data_ptr();
  a.norm_weight = folds.norm_weight.defined() ? folds.norm_weight.data_ptr() : nullptr;
  a.eps = static_cast<float>(folds.eps);
  a.gated = folds.gated;
  a.weight = weight.data_ptr();
  a.bias = bias.defined() ? bias.data_ptr() : nullptr;
  a.residual = residual.defined() ? residual.data_ptr() : nullptr;
  a.normed_out = folds.normed_out.defined() ? folds.normed_out.data_ptr() : nullptr;
  a.out = out.data_ptr();
  a.in_features = K;
  a.out_features = N;
  a.element = element_of(x);
  TORCH_CHECK(kernels::launch_small_linear(a, stream_of(x)), "small_linear: launch failed");
  return out;
}

namespace {

// What both decode attention entries check: caches, valid slots, the slot, the span, sinks and window, for B rows
// of H query heads of D elements on `device`.
void check_attention_inputs(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& key_valid,
                            const at::Tensor& slot, int64_t visible, const at::Tensor& sinks, int64_t window,
                            int64_t B, int64_t H, int64_t D, c10::Device device) {
  const int64_t capacity = k_cache.size(2);
  TORCH_CHECK(decode_attention_takes(k_cache, H), "decode_attention: caches or heads the kernels do not take");
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous() && aligned16(v_cache) &&
                  v_cache.scalar_type() == k_cache.scalar_type() && k_cache.size(0) == B && k_cache.size(3) == D &&
                  k_cache.device() == device && v_cache.device() == device,
              "decode_attention: caches [B, Hkv, capacity, D] on q's GPU, both contiguous");
  TORCH_CHECK(key_valid.scalar_type() == at::kBool && key_valid.is_contiguous() && key_valid.dim() == 2 &&
                  key_valid.size(0) == B && key_valid.size(1) == capacity && key_valid.device() == device &&
                  slot.device() == device,
              "decode_attention: key_valid must be [B, capacity] bool, contiguous, on q's GPU");
  TORCH_CHECK(slot.scalar_type() == at::kLong && slot.numel() == 1, "decode_attention: slot [1] int64");
  TORCH_CHECK(visible > 0 && visible <= capacity, "decode_attention: visible must be in [1, capacity]");
  TORCH_CHECK(!sinks.defined() || (sinks.scalar_type() == at::kFloat && sinks.is_contiguous() && sinks.dim() == 1 &&
                                   sinks.size(0) == H && sinks.device() == device),
              "decode_attention: sinks must be [H] float32, contiguous, on q's GPU");
  TORCH_CHECK(window >= 0, "decode_attention: window must be 0 (none) or positive");
}

// The launch's arguments (but the split kernels' partials) for B = queries.size(0) rows of H query heads of D, row
// b's head h at queries + b * row_stride + h * head_stride, after check_attention_inputs; `out` allocated for them.
kernels::AttendArgs attend_args(const at::Tensor& queries, int64_t row_stride, int64_t head_stride, int64_t H,
                                int64_t D, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const at::Tensor& key_valid, const at::Tensor& slot, int64_t visible, double scale,
                                const at::Tensor& sinks, int64_t window, at::Tensor& out) {
  const int64_t B = queries.size(0);
  check_attention_inputs(k_cache, v_cache, key_valid, slot, visible, sinks, window, B, H, D, queries.device());
  out = at::empty({B, 1, H * D}, queries.options());
  kernels::AttendArgs a;
  a.q = queries.data_ptr();
  a.q_row_stride = row_stride;
  a.q_head_stride = head_stride;
  a.batch = static_cast<int>(B);
  a.heads = static_cast<int>(H);
  a.kv_heads = static_cast<int>(k_cache.size(1));
  a.head_dim = static_cast<int>(D);
  a.capacity = k_cache.size(2);
  a.visible = visible;
  a.scale = static_cast<float>(scale);
  a.element = element_of(k_cache);
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.key_valid = key_valid.data_ptr<bool>();
  a.slot = slot.data_ptr<int64_t>();
  a.out = out.data_ptr();
  a.sinks = sinks.defined() ? sinks.data_ptr<float>() : nullptr;
  a.window = window;
  return a;
}

// What rotate_into_cache and rotate_and_attend check of the step's q/k/v rows, positions and rotary tables.
void check_rotation_inputs(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& slots,
                           const at::Tensor& cos, const at::Tensor& signed_sin, int64_t heads, int64_t kv_heads,
                           int64_t D) {
  const int64_t B = qkv.size(0);
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(1) == 1 && qkv.size(2) == (heads + 2 * kv_heads) * D && qkv.stride(2) == 1,
              "decode rotation: qkv must be [B, 1, (H + 2 Hkv) D] with a contiguous last dimension");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 2 && positions.size(0) == B &&
                  positions.size(1) == 1 && slots.scalar_type() == at::kLong && slots.numel() == 1,
              "decode rotation: positions [B, 1] and slots [1], int64");
  TORCH_CHECK(cos.dim() == 2 && signed_sin.dim() == 2 && cos.is_contiguous() && signed_sin.is_contiguous() &&
                  cos.size(1) == D && signed_sin.size(1) == D && cos.scalar_type() == qkv.scalar_type() &&
                  signed_sin.scalar_type() == qkv.scalar_type(),
              "decode rotation: rotary tables [n, D] in the model dtype");
  TORCH_CHECK(positions.device() == qkv.device() && cos.device() == qkv.device() &&
                  signed_sin.device() == qkv.device(),
              "decode rotation: positions and tables on qkv's GPU");
}

kernels::RotaryRows rotary_rows(const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& signed_sin) {
  kernels::RotaryRows r;
  r.cos = cos.data_ptr();
  r.signed_sin = signed_sin.data_ptr();
  r.table_rows = std::min(cos.size(0), signed_sin.size(0));
  r.positions = positions.data_ptr<int64_t>();
  r.position_stride = positions.stride(0);
  return r;
}

}  // namespace

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& key_valid, const at::Tensor& slot, int64_t visible, double scale,
                            const at::Tensor& sinks, int64_t window) {
  TORCH_CHECK(q.dim() == 4 && q.size(1) == 1 && q.stride(3) == 1 && q.scalar_type() == k_cache.scalar_type(),
              "decode_attention: q must be [B, 1, H, D] in the caches' dtype with D contiguous");
  const int64_t B = q.size(0), H = q.size(2), D = q.size(3);
  const c10::cuda::CUDAGuard on_its_device(q.device());
  at::Tensor out;
  auto a = attend_args(q, q.stride(0), q.stride(2), H, D, k_cache, v_cache, key_valid, slot, visible, scale, sinks,
                       window, out);
  if (tensor_cores_attend(k_cache, H)) {
    TORCH_CHECK(kernels::launch_attend_tensor_cores(a, stream_of(q)), "decode_attention: launch failed");
    return out;
  }
  a.rounds = kernels::attention_rounds(a.batch, a.kv_heads);
  a.chunk = kernels::attention_chunk(a.head_dim, a.element, a.rounds);
  a.splits = static_cast<int>((visible + a.chunk - 1) / a.chunk);
  auto partial = at::empty({B * H, a.splits, D + 2}, q.options().dtype(at::kFloat));
  a.partial = partial.data_ptr<float>();
  TORCH_CHECK(kernels::launch_attend(a, stream_of(q)), "decode_attention: launch failed");
  return out;
}

bool rotation_folds_into_attention(const at::Tensor& k_cache, int64_t heads, bool normalised_heads) {
  if (!rotation_fold_on().load(std::memory_order_relaxed) || normalised_heads ||
      !decode_attention_takes(k_cache, heads) || !kernels::rotation_takes(k_cache.size(3)))
    return false;
  const c10::cuda::CUDAGuard on_its_device(k_cache.device());
  return tensor_cores_attend(k_cache, heads);
}

void set_rotation_fold(bool on) { rotation_fold_on().store(on, std::memory_order_relaxed); }

at::Tensor rotate_and_attend(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& cos,
                             const at::Tensor& signed_sin, at::Tensor& k_cache, at::Tensor& v_cache,
                             const at::Tensor& key_valid, const at::Tensor& slot, int64_t visible, double scale,
                             int64_t heads, const at::Tensor& sinks, int64_t window) {
  const int64_t D = k_cache.size(3);
  TORCH_CHECK(rotation_folds_into_attention(k_cache, heads, false),
              "rotate_and_attend: caches, heads or a GPU the tensor-core kernel does not take, or switched off");
  TORCH_CHECK(qkv.scalar_type() == k_cache.scalar_type(), "rotate_and_attend: qkv in the caches' dtype");
  check_rotation_inputs(qkv, positions, slot, cos, signed_sin, heads, k_cache.size(1), D);
  const c10::cuda::CUDAGuard on_its_device(qkv.device());
  at::Tensor out;  // the q/k/v row's heads are D apart
  auto a = attend_args(qkv, qkv.stride(0), D, heads, D, k_cache, v_cache, key_valid, slot, visible, scale, sinks,
                       window, out);
  a.rotary = rotary_rows(positions, cos, signed_sin);
  TORCH_CHECK(kernels::launch_attend_tensor_cores(a, stream_of(qkv)), "rotate_and_attend: launch failed");
  return out;
}

at::Tensor rotate_into_cache(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& slots,
                             const at::Tensor& cos, const at::Tensor& signed_sin, at::Tensor& k_cache,
                             at::Tensor& v_cache, int64_t heads, int64_t kv_heads, const at::Tensor& q_norm,
                             const at::Tensor& k_norm, double eps) {
  const int64_t B = qkv.size(0), D = k_cache.size(3);
  const bool normalised = q_norm.defined();
  TORCH_CHECK(normalised == k_norm.defined(), "rotate_into_cache: q_norm and k_norm come together");
  TORCH_CHECK(kernels::rotation_takes(D, normalised), "rotate_into_cache: heads of ", D, " elements");
  TORCH_CHECK(!normalised || (k_norm.defined() && q_norm.is_contiguous() && k_norm.is_contiguous() &&
                              q_norm.numel() == D && k_norm.numel() == D && q_norm.device() == qkv.device() &&
                              k_norm.device() == qkv.device() && q_norm.scalar_type() == qkv.scalar_type() &&
                              k_norm.scalar_type() == qkv.scalar_type()),
              "rotate_into_cache: q_norm and k_norm [D], contiguous, in the model dtype on its device");
  check_rotation_inputs(qkv, positions, slots, cos, signed_sin, heads, kv_heads, D);
  TORCH_CHECK(k_cache.scalar_type() == qkv.scalar_type() && v_cache.scalar_type() == qkv.scalar_type() &&
                  k_cache.stride(3) == 1 && v_cache.stride(3) == 1 && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.size(0) == B && k_cache.size(1) == kv_heads,
              "rotate_into_cache: caches [B, Hkv, capacity, D] in the model dtype");
  const c10::cuda::CUDAGuard on_its_device(qkv.device());  // launches go to the current device
  auto q = at::empty({B, 1, heads, D}, qkv.options());
  kernels::RotateArgs a;
  a.qkv = qkv.data_ptr();
  a.qkv_row_stride = qkv.stride(0);
  a.rotary = rotary_rows(positions, cos, signed_sin);
  a.slot = slots.data_ptr<int64_t>();
  a.q = q.data_ptr();
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.capacity = k_cache.size(2);
  for (int i = 0; i < 3; ++i) {
    a.k_strides[i] = k_cache.stride(i);
    a.v_strides[i] = v_cache.stride(i);
  }
  a.batch = static_cast<int>(B);
  a.heads = static_cast<int>(heads);
  a.kv_heads = static_cast<int>(kv_heads);
  a.head_dim = static_cast<int>(D);
  a.element = element_of(qkv);
  if (normalised) {
    a.q_norm = q_norm.data_ptr();
    a.k_norm = k_norm.data_ptr();
    a.eps = static_cast<float>(eps);
  }
  TORCH_CHECK(kernels::launch_rotate_into_cache(a, stream_of(qkv)), "rotate_into_cache: launch failed");
  return q;
}

at::Tensor silu_times_up(const at::Tensor& gate_up) {
  const c10::cuda::CUDAGuard on_its_device(gate_up.device());
  const auto in = gate_up.contiguous();
  const int64_t I = in.size(-1) / 2;
  auto sizes = in.sizes().vec();
  sizes.back() = I;
  auto out = at::empty(sizes, in.options());
  kernels::SiluArgs a;
  a.gate_up = in.data_ptr();
  a.out = out.data_ptr();
  a.rows = in.numel() / std::max<int64_t>(1, in.size(-1));
  a.width = I;
  a.element = element_of(in);
  TORCH_CHECK(kernels::launch_silu_times_up(a, stream_of(in)), "silu_times_up: launch failed");
  return out;
}

at::Tensor pick_by_cdf_fused(const at::Tensor& log_probs, const at::Tensor& uniform) {
  TORCH_CHECK(log_probs.scalar_type() == at::kFloat && log_probs.dim() == 2 && log_probs.stride(1) == 1,
              "pick_by_cdf_fused: log_probs must be [B, V] float32 with a contiguous last dimension");
  const c10::cuda::CUDAGuard on_its_device(log_probs.device());
  const auto draws = uniform.to(log_probs.device(), at::kFloat).contiguous();
  TORCH_CHECK(draws.numel() == log_probs.size(0), "pick_by_cdf_fused: one draw per row");
  auto out = at::empty({log_probs.size(0), 1}, log_probs.options().dtype(at::kLong));
  kernels::PickArgs a;
  a.log_probs = log_probs.data_ptr<float>();
  a.row_stride = log_probs.stride(0);
  a.vocab = log_probs.size(1);
  a.uniform = draws.data_ptr<float>();
  a.out = out.data_ptr<int64_t>();
  a.batch = static_cast<int>(log_probs.size(0));
  TORCH_CHECK(kernels::launch_pick_by_cdf(a, stream_of(log_probs)), "pick_by_cdf_fused: launch failed");
  return out;
}

bool sample_fused_serves(const at::Tensor& logits) {
  return fused_sampling_on().load(std::memory_order_relaxed) && decode_kernels_serve(logits) && logits.dim() == 2 &&
         logits.stride(1) == 1 && logits.size(0) > 0 && logits.size(0) <= 65535 && logits.size(1) > 0 &&
         kernels::sample_chunks(logits.size(1)) <= kernels::kSampleMaxChunks;
}

void set_fused_sampling(bool on) { fused_sampling_on().store(on); }

FusedSample sample_fused(const at::Tensor& logits, const at::Tensor& inv_temperature, const at::Tensor& greedy,
                         const at::Tensor& seeds, const at::Tensor& steps, int64_t step) {
  TORCH_CHECK(sample_fused_serves(logits), "sample_fused: logits the kernels do not take");
  const int64_t B = logits.size(0), V = logits.size(1);
  const auto on_device = [&](const at::Tensor& t, at::ScalarType type) {
    return t.defined() && t.scalar_type() == type && t.is_contiguous() && t.numel() == B && t.device() == logits.device();
  };
  TORCH_CHECK(on_device(inv_temperature, at::kFloat) && on_device(greedy, at::kBool) && on_device(seeds, at::kLong) &&
                  (!steps.defined() || on_device(steps, at::kLong)),
              "sample_fused: inv_temperature float32, greedy bool, seeds and steps int64, [B] each, contiguous, on the "
              "logits' GPU");
  const c10::cuda::CUDAGuard on_its_device(logits.device());
  const auto options = logits.options();
  FusedSample out;
  out.tokens = at::empty({B}, options.dtype(at::kLong));
  out.record = at::empty({3, B}, options.dtype(at::kDouble));
  const auto logprobs = at::empty({2, B}, options.dtype(at::kFloat));
  out.sampling_logprobs = logprobs.select(0, 0);
  out.model_logprobs = logprobs.select(0, 1);
  auto chunks = at::empty({B, kernels::sample_chunks(V), 4}, options.dtype(at::kFloat));
  static_assert(sizeof(kernels::SampleChunk) == 4 * sizeof(float), "four 4-byte fields");
  kernels::SampleArgs a;
  a.logits = logits.data_ptr();
  a.row_stride = logits.stride(0);
  a.vocab = V;
  a.aligned16 = aligned16(logits) && (logits.stride(0) * logits.element_size()) % 16 == 0;
  a.inv_temperature = inv_temperature.data_ptr<float>();
  a.greedy = greedy.data_ptr<bool>();
  a.seeds = reinterpret_cast<const uint64_t*>(seeds.data_ptr<int64_t>());
  a.steps = steps.defined() ? steps.data_ptr<int64_t>() : nullptr;
  a.step = step;
  a.chunks = reinterpret_cast<kernels::SampleChunk*>(chunks.data_ptr<float>());
  a.tokens = out.tokens.data_ptr<int64_t>();
  a.sampling_logprobs = out.sampling_logprobs.data_ptr<float>();
  a.model_logprobs = out.model_logprobs.data_ptr<float>();
  a.record = out.record.data_ptr<double>();
  a.batch = static_cast<int>(B);
  a.element = element_of(logits);
  TORCH_CHECK(kernels::launch_sample(a, stream_of(logits)), "sample_fused: launch failed");
  return out;
}

}  // namespace crucible::lm

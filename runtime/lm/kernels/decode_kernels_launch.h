#pragma once
// The decode kernels' launches in plain CUDA types: the .cu file does not see LibTorch.
#include <cuda_runtime.h>

#include <cstdint>

namespace crucible::lm::kernels {

enum class Element { f32, bf16, f16 };

// A decode step's rotary rows: row b's rotation reads the tables' row positions[b * position_stride].
struct RotaryRows {
  const void* cos = nullptr;  // [table_rows, D], signs folded into signed_sin (rotate_half's)
  const void* signed_sin = nullptr;
  int64_t table_rows = 0;
  const int64_t* positions = nullptr;
  int64_t position_stride = 0;
};

struct RotateArgs {
  const void* qkv = nullptr;  // row b at qkv + b * qkv_row_stride: H query, Hkv key, Hkv value heads of D
  int64_t qkv_row_stride = 0;
  RotaryRows rotary;
  const int64_t* slot = nullptr;  // [1]
  void* q = nullptr;              // [B, H, D] contiguous
  void* k_cache = nullptr;        // element (b, h, s, d) at b * cache_strides[0] + h * [1] + s * [2] + d
  void* v_cache = nullptr;
  int64_t k_strides[3] = {0, 0, 0}, v_strides[3] = {0, 0, 0};
  int64_t capacity = 0;  // the caches' slots
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  Element element = Element::f32;
  // Qwen3: each query and key head RMS-normalised (these [D] weights, this epsilon) before its rotation; null: none.
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  float eps = 0.0f;
};

// Whether the rotation kernel takes heads of `head_dim` (one thread per element of a head; normalising heads sums
// over whole warps).
inline bool rotation_takes(int64_t head_dim, bool normalised = false) {
  return head_dim > 0 && head_dim % 2 == 0 && head_dim <= 1024 && (!normalised || head_dim % 32 == 0);
}

struct SiluArgs {
  const void* gate_up = nullptr;  // [rows, 2 I]
  void* out = nullptr;            // [rows, I]
  int64_t rows = 0, width = 0;    // width: I
  Element element = Element::f32;
};

struct PickArgs {
  const float* log_probs = nullptr;  // row b at log_probs + b * row_stride, V entries
  int64_t row_stride = 0, vocab = 0;
  const float* uniform = nullptr;  // [B]
  int64_t* out = nullptr;          // [B]
  int batch = 0;
};

inline int element_bytes(Element e) { return e == Element::f32 ? 4 : 2; }

// Sampling straight from logits, in two kernels: blocks over chunks of kSampleChunk entries of a row, each writing its
// chunk's highest logit, the first index holding it, and its sums of exponentials under the model's distribution and
// under the row's temperature; then one block per row merges its chunks, finds the chunk where the row's draw falls
// and scans it. At most kSampleMaxChunks chunks a row (the merge keeps a weight per chunk in shared memory).
constexpr int kSampleThreads = 256;
constexpr int kSamplePerThread = 8;
constexpr int kSampleChunk = kSampleThreads * kSamplePerThread;
constexpr int kSampleMaxChunks = 1024;

struct SampleChunk {
  float top = 0.0f;         // the chunk's highest logit (-inf where it has none above -inf)
  float model_sum = 0.0f;   // sum of exp(logit - top)
  float sample_sum = 0.0f;  // sum of exp((logit - top) * inverse temperature)
  int first_top = 0;        // the first index holding `top`
};

inline int64_t sample_chunks(int64_t vocab) { return (vocab + kSampleChunk - 1) / kSampleChunk; }

struct SampleArgs {
  const void* logits = nullptr;  // row b at logits + b * row_stride, `vocab` entries
  int64_t row_stride = 0, vocab = 0;
  bool aligned16 = false;  // every row starts on 16 bytes
  const float* inv_temperature = nullptr;  // [B]; 1 for greedy rows
  const bool* greedy = nullptr;            // [B]: the first highest logit, no draw
  const uint64_t* seeds = nullptr;         // [B]: row b draws row_uniform(seeds[b], its step)
  const int64_t* steps = nullptr;          // [B], or null: every row at `step`
  int64_t step = 0;
  SampleChunk* chunks = nullptr;  // [B, sample_chunks(vocab)] workspace
  int64_t* tokens = nullptr;      // [B]
  float* sampling_logprobs = nullptr;  // [B]: under the row's temperature (0 for greedy rows)
  float* model_logprobs = nullptr;     // [B]: under the model's distribution
  double* record = nullptr;            // [3, B]: tokens, sampling and model log-probs, for one copy to the host
  int batch = 0;
  Element element = Element::f32;
};

// The decode attention kernels' splits: each of a block's kAttentionThreads / attend_lanes() slot groups loads this
// many cache rows at once, or kAttentionFewRounds where rows x key heads are at most kAttentionFewRows (so few blocks
// that shorter splits, twice as many, finish sooner). At most kAttentionMaxSplits splits (the combine keeps a weight
// per split in shared memory).
constexpr int kAttentionThreads = 128;
constexpr int kAttentionRounds = 4;
constexpr int kAttentionFewRounds = 2;
constexpr int kAttentionFewRows = 8;
constexpr int kAttentionMaxSplits = 8192;

inline int attention_rounds(int batch, int kv_heads) {
  return batch * kv_heads <= kAttentionFewRows ? kAttentionFewRounds : kAttentionRounds;
}

// Lanes per cache row: a head's bytes in 16-byte loads (0: not a whole number of them).
inline int attend_lanes(int head_dim, Element e) {
  const int bytes = head_dim * element_bytes(e);
  return bytes % 16 == 0 ? bytes / 16 : 0;
}

// Cache slots per split of `rounds` rounds.
inline int attention_chunk(int head_dim, Element e, int rounds) {
  const int lanes = attend_lanes(head_dim, e);
  return lanes > 0 ? kAttentionThreads / lanes * rounds : 0;
}

struct AttendArgs {
  const void* q = nullptr;  // query head h of row b at q + b * q_row_stride + h * q_head_stride, D contiguous
  int64_t q_row_stride = 0, q_head_stride = 0;
  void* k_cache = nullptr;  // [B, Hkv, capacity, D] contiguous, 16-byte aligned
  void* v_cache = nullptr;
  // The tensor-core kernel only: where rotary.cos is set, q is the step's q/k/v row as rotate_into_cache takes it
  // (H query, Hkv key, Hkv value heads, q_head_stride = D apart), and the kernel rotates the queries and key itself
  // and writes the step's key and value into the caches, as rotate_into_cache does (one kernel fewer a layer).
  // The positions are written before the step, like the slot.
  RotaryRows rotary;
  const bool* key_valid = nullptr;  // [B, capacity] contiguous: slots a row may attend (its own always)
  const int64_t* slot = nullptr;    // [1]: the step's slot; attention reads slots up to it. Written before the step
                                    // (an early launch reads it, and the other slots, before its wait)
  float* partial = nullptr;         // [B * H, splits, D + 2] float32 workspace
  void* out = nullptr;              // [B, H * D] contiguous
  int64_t capacity = 0;
  int64_t visible = 0;  // the step's slot is below it (a device error otherwise)
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int rounds = kAttentionRounds;  // attention_rounds(batch, kv_heads)
  int chunk = 0, splits = 0;  // attention_chunk(.., rounds) slots per split; splits * chunk covers the slots a step may reach
  float scale = 1.0f;
  Element element = Element::f32;
  // gpt-oss: a learned logit per query head that joins each softmax and adds no value, and a sliding window: slots
  // more than `window - 1` before the step's own are not attended (0: no window).
  const float* sinks = nullptr;  // [heads], or null
  int64_t window = 0;
};

// Whether the decode attention kernels take these heads: up to 8 query heads per key head, and a head a power-of-two
// number of 16-byte loads wide, at most a warp's worth (D = 64 or 128 in every dtype).
bool attention_takes(int heads, int kv_heads, int head_dim, Element element);

// Whether the tensor-core attention kernel (attention_tensor_cores.cu) takes these heads and caches: 16-bit elements,
// D = 64 or 128, up to 8 query heads per key head, up to kAttentionTensorCoresMaxSlots slots (a bit each in shared
// memory), and a GPU (the current one) of compute capability 8.0 or later that lets a block have about 208 KiB of
// shared memory (Hopper's 227 KiB; an A100's 163 KiB is too little). It takes AttendArgs without the splits
// (one block per row and key head; no partials).
constexpr int64_t kAttentionTensorCoresMaxSlots = 65536;
bool attention_tensor_cores_take(int heads, int kv_heads, int head_dim, Element element, int64_t capacity);

struct LinearArgs {
  const void* x = nullptr;            // [in_features]
  const void* norm_weight = nullptr;  // [in_features], or null: x is RMS-normalised with this weight and eps first
  float eps = 0.0f;
  bool gated = false;  // the weight is [gate; up], 2 out_features rows: out[n] = silu(gate[n]) * up[n]
  const void* weight = nullptr;    // [out_features, in_features] contiguous (twice the rows where gated)
  const void* bias = nullptr;      // [out_features] or null (twice the elements where gated)
  const void* residual = nullptr;  // [out_features] or null; never with gated
  void* normed_out = nullptr;      // [in_features] or null: with norm_weight, the normalised x is written there too
  void* out = nullptr;             // [out_features]
  int64_t in_features = 0, out_features = 0;
  Element element = Element::f32;
};

// The one-row linear kernel keeps a normalised input in shared memory: at most this many bytes of it (a block's
// default 48 KiB, less room for the kernel's own few shared floats).
constexpr int64_t kLinearMaxNormedBytes = 48 * 1024 - 256;

// Whether the one-row linear kernel takes rows of `in_features`: whole 16-byte slices, and where normalised, up to
// kLinearMaxNormedBytes.
inline bool small_linear_takes(int64_t in_features, Element e, bool normed) {
  const int64_t bytes = in_features * element_bytes(e);
  return in_features > 0 && bytes % 16 == 0 && (!normed || bytes <= kLinearMaxNormedBytes);
}

// Launches the kernels with programmatic dependent launch on GPUs that have it (each may start while the one before it
// finishes), or plainly. On unless CRUCIBLE_DECODE_PDL=0; benchmarks compare both.
void allow_early_launch(bool on);

// The one-row linear kernel copies a block's second round of rows into shared memory before it waits, where it serves
// (on unless CRUCIBLE_DECODE_GEMV_AHEAD=0; the same sums either way).
void allow_rows_ahead(bool on);

// False on a launch error or a shape the kernels do not take (rotation_takes). A position outside the rotary tables
// or a slot outside the caches stops the kernel with a device error, as LibTorch's index checks do.
bool launch_rotate_into_cache(const RotateArgs& a, cudaStream_t stream);
bool launch_silu_times_up(const SiluArgs& a, cudaStream_t stream);
bool launch_pick_by_cdf(const PickArgs& a, cudaStream_t stream);
bool launch_sample(const SampleArgs& a, cudaStream_t stream);
bool launch_attend(const AttendArgs& a, cudaStream_t stream);
bool launch_attend_tensor_cores(const AttendArgs& a, cudaStream_t stream);
bool launch_small_linear(const LinearArgs& a, cudaStream_t stream);

}  // namespace crucible::lm::kernels

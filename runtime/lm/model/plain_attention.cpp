#include "lm/model/plain_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace crucible::lm {

at::Tensor additive_mask(const at::Tensor& mask, c10::ScalarType dtype) {
  return at::zeros(mask.sizes(), mask.options().dtype(dtype))
      .masked_fill_(at::logical_not(mask), -std::numeric_limits<double>::infinity());
}

at::Tensor scaled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                            double scale) {
#if CRUCIBLE_SDPA
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale);
#else
  auto scores = at::matmul(q, k.transpose(-1, -2)).to(at::kFloat) * scale;
  scores = mask.scalar_type() == at::kBool
               ? scores.masked_fill(at::logical_not(mask), -std::numeric_limits<float>::infinity())
               : scores + mask.to(at::kFloat);
  auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, v);
#endif
}

at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& query_slots, int64_t window) {
  const int64_t visible = mask.size(-1);
  const auto key_slots = at::arange(visible, query_slots.options()).view({1, visible});
  const auto near = key_slots > query_slots.view({-1, 1}) - window;  // [T, visible]
  return mask & near.view({1, 1, near.size(0), visible});
}

namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The keys and values many query rows attend to: query head h reads key head h / G, so each key head is repeated G
// times. With sinks, the sink is one more key, so that attention with sinks is plain attention (a fused kernel on a
// GPU, with its gradients): queries get two more coordinates equal to 1 (sink_queries), the sink key carries
// sink / scale there (a high and a low part, so that bfloat16 keeps the logit to about 2^-16 of itself), every other
// key 0; the sink's value is 0, so its share of the softmax leaves the output. Head dimensions are padded to a
// multiple of 8 and keys to a multiple of 16 (masked), as the fused kernels want. Made once for all chunks of rows.
struct AttendedKeys {
  at::Tensor k, v;  // [B, H, S', D'], S' = visible (+ the sink and padding), D' = D (+ 2 and padding)
  int64_t visible = 0;
  bool sink = false;
};

AttendedKeys attended_keys(const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t heads, int64_t visible,
                           const at::Tensor& sinks, double scale) {
  const int64_t G = heads / k_cache.size(1);
  auto keys = k_cache.narrow(2, 0, visible).repeat_interleave(G, 1);
  auto values = v_cache.narrow(2, 0, visible).repeat_interleave(G, 1);
  if (!sinks.defined()) return {keys, values, visible, false};
  const int64_t B = keys.size(0), H = heads, D = keys.size(3);
  const int64_t padded_d = round_up(D + 2, 8), padded_s = round_up(visible + 1, 16);
  const auto options = keys.options().requires_grad(false);
  const auto logit = sinks.to(at::kDouble) / scale;
  const auto high = logit.to(keys.scalar_type());
  const auto low = (logit - high.to(at::kDouble)).to(keys.scalar_type());  // its gradient in the sinks cancels
  const auto sink_key = at::cat({at::zeros({H, D}, options), at::stack({high, low}, 1),
                                 at::zeros({H, padded_d - D - 2}, options)}, 1);  // differentiable in the sinks
  const auto sink_and_pad_keys = at::cat({sink_key.view({1, H, 1, padded_d}).expand({B, H, 1, padded_d}),
                                          at::zeros({B, H, padded_s - visible - 1, padded_d}, options)}, 2);
  return {at::cat({at::constant_pad_nd(keys, {0, padded_d - D}), sink_and_pad_keys}, 2),
          at::constant_pad_nd(values, {0, padded_d - D, 0, padded_s - visible}), visible, true};
}

// q [B, H, T, D] with the two coordinates the sink key is read through, padded as the keys; allowed [B, 1, T, visible]
// bool as an additive mask over the padded keys, the sink's column seen by every row.
std::pair<at::Tensor, at::Tensor> sink_queries(const at::Tensor& q, const at::Tensor& allowed,
                                               const AttendedKeys& keys) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const auto options = q.options().requires_grad(false);
  const auto column_mask = at::zeros({B, 1, T, keys.k.size(2) - keys.visible}, allowed.options());
  column_mask.narrow(-1, 0, 1).fill_(true);
  return {at::cat({q, at::ones({B, H, T, 2}, options), at::zeros({B, H, T, keys.k.size(3) - D - 2}, options)}, -1),
          additive_mask(at::cat({allowed.expand({B, 1, T, keys.visible}), column_mask}, -1), q.scalar_type())};
}

// The scores materialised, the sinks as one more column of the softmax: what a decode step's few query rows take.
// Its result does not depend on how many masked slots follow the visible ones (a decode step in a CUDA graph attends
// over its graph's span, an eager one over the slots in use), where a fused kernel's sums may be split differently.
at::Tensor attend_materialised(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
                               const at::Tensor& mask, const at::Tensor& sinks, double scale, int64_t visible) {
  const int64_t B = queries.size(0), T = queries.size(1), H = queries.size(2), D = queries.size(3);
  const int64_t Hkv = k_cache.size(1), G = H / Hkv;
  // The G query heads that share a key head become G x T query rows of that head (head h reads key head h / G).
  const auto grouped = queries.transpose(1, 2).reshape({B, Hkv, G * T, D});
  const auto keys = k_cache.narrow(2, 0, visible);
  const auto values = v_cache.narrow(2, 0, visible);
  auto scores = at::matmul(grouped, keys.transpose(-1, -2)).to(at::kFloat) * scale;  // [B, Hkv, G T, visible]
  const auto allowed = mask.expand({B, 1, T, visible}).repeat({1, 1, G, 1});
  scores = scores.masked_fill(at::logical_not(allowed), -std::numeric_limits<float>::infinity());
  at::Tensor probs;
  if (sinks.defined()) {
    const auto sink_column =
        sinks.to(at::kFloat).view({1, Hkv, G, 1, 1}).expand({B, Hkv, G, T, 1}).reshape({B, Hkv, G * T, 1});
    probs = at::softmax(at::cat({scores, sink_column}, -1), -1).narrow(-1, 0, visible);
  } else {
    probs = at::softmax(scores, -1);
  }
  return at::matmul(probs.to(values.scalar_type()), values).reshape({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
}

// Many query rows (prefills, log-prob and training passes, or a chunk of them) through scaled_attention.
at::Tensor attend(const at::Tensor& queries, const AttendedKeys& keys, const at::Tensor& mask, double scale) {
  const int64_t B = queries.size(0), T = queries.size(1), H = queries.size(2), D = queries.size(3);
  const auto q = queries.transpose(1, 2);
  at::Tensor out;
  if (keys.sink) {
    const auto [q_with_sink, sink_mask] = sink_queries(q, mask, keys);
    out = scaled_attention(q_with_sink, keys.k, keys.v, sink_mask, scale).narrow(-1, 0, D);
  } else {
    out = scaled_attention(q, keys.k, keys.v, mask, scale);
  }
  return out.transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace

at::Tensor plain_attention(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& mask, const at::Tensor& sinks, double scale, int64_t visible,
                           int64_t chunk_scores) {
  // Query rows are independent, so a chunk of them at a time gives the same rows; where the scores are materialised,
  // the softmax's several float32 copies of them then stay near chunk_scores elements.
  const int64_t B = queries.size(0), T = queries.size(1), H = queries.size(2);
  if (T <= kFewQueryRows) return attend_materialised(queries, k_cache, v_cache, mask, sinks, scale, visible);
  // LibTorch before 2.5 had masked memory-efficient attention give NaN where queries and keys differ in number.
  const bool fused = CRUCIBLE_SDPA_GQA && queries.is_cuda();
  const int64_t rows = std::max<int64_t>(1, chunk_scores / std::max<int64_t>(1, B * H * visible));
  const auto keys = attended_keys(k_cache, v_cache, H, visible, sinks, scale);
  if (fused || rows >= T) return attend(queries, keys, mask, scale);
  std::vector<at::Tensor> parts;
  for (int64_t t0 = 0; t0 < T; t0 += rows) {
    const int64_t n = std::min(rows, T - t0);
    const auto rows_mask = mask.size(2) == T ? mask.narrow(2, t0, n) : mask;  // a mask may broadcast over rows
    parts.push_back(attend(queries.narrow(1, t0, n), keys, rows_mask, scale));
  }
  return at::cat(parts, 1);
}

}  // namespace crucible::lm

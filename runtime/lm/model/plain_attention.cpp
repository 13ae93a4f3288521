#include "lm/model/plain_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace crucible::lm {

at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& query_slots, int64_t window) {
  const int64_t visible = mask.size(-1);
  const auto key_slots = at::arange(visible, query_slots.options()).view({1, visible});
  const auto near = key_slots > query_slots.view({-1, 1}) - window;  // [T, visible]
  return mask & near.view({1, 1, near.size(0), visible});
}

namespace {

// One block of query rows (all of them, or a chunk): the scores of these rows against every visible slot.
at::Tensor attend(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
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
    // Each head's sink logit as one more column of its rows; its share of the softmax is dropped.
    const auto sink_column = sinks.to(at::kFloat).view({1, Hkv, G, 1, 1}).expand({B, Hkv, G, T, 1}).reshape({B, Hkv, G * T, 1});
    probs = at::softmax(at::cat({scores, sink_column}, -1), -1).narrow(-1, 0, visible);
  } else {
    probs = at::softmax(scores, -1);
  }
  return at::matmul(probs.to(values.scalar_type()), values)
      .reshape({B, H, T, D})
      .transpose(1, 2)
      .reshape({B, T, H * D});
}

}  // namespace

at::Tensor plain_attention(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& mask, const at::Tensor& sinks, double scale, int64_t visible,
                           int64_t chunk_scores) {
  // Query rows are independent, so a chunk of them at a time gives the same rows; the softmax's several float32
  // copies of the scores then stay near chunk_scores elements.
  const int64_t B = queries.size(0), T = queries.size(1), H = queries.size(2);
  const int64_t rows = std::max<int64_t>(1, chunk_scores / std::max<int64_t>(1, B * H * visible));
  if (rows >= T) return attend(queries, k_cache, v_cache, mask, sinks, scale, visible);
  std::vector<at::Tensor> parts;
  for (int64_t t0 = 0; t0 < T; t0 += rows) {
    const int64_t n = std::min(rows, T - t0);
    const auto rows_mask = mask.size(2) == T ? mask.narrow(2, t0, n) : mask;  // a mask may broadcast over rows
    parts.push_back(attend(queries.narrow(1, t0, n), k_cache, v_cache, rows_mask, sinks, scale, visible));
  }
  return at::cat(parts, 1);
}

}  // namespace crucible::lm

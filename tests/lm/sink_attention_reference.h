#pragma once
// gpt-oss's attention with a sink column, in double on the CPU: the reference the CPU and GPU attention tests
// compare against, differentiable by autograd.
#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

namespace crucible::test {

// The softmax over the visible keys and the sink, the sink's share dropped. q [B, T, H, D], k and v [B, Hkv, S, D]
// (key head h / G for query head h), allowed [B or 1, 1, T, S], sinks [H] -> [B, T, H * D].
inline at::Tensor sink_attention_in_double(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& allowed, const at::Tensor& sinks, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), S = k.size(2), G = H / k.size(1);
  const auto keys = k.repeat_interleave(G, 1), values = v.repeat_interleave(G, 1);
  auto scores = at::matmul(q.transpose(1, 2), keys.transpose(-1, -2)) * scale;  // [B, H, T, S]
  scores = scores.masked_fill(at::logical_not(allowed), -std::numeric_limits<double>::infinity());
  const auto sink = sinks.view({1, H, 1, 1}).expand({B, H, T, 1});
  const auto probs = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, S);
  return at::matmul(probs, values).transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace crucible::test

#pragma once
// Rotary position embeddings: inverse frequencies from rope_theta (with Llama-3's or YaRN's scaling when configured),
// and cos/sin tables by position, computed in float32 the way transformers does and cast to the model dtype.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>

#include "lm/format/model_config.h"

namespace crucible::lm {

at::Tensor rope_inverse_frequencies(const ModelConfig& config);  // [D/2] float32, on the CPU
double rope_attention_factor(const ModelConfig& config);         // what cos and sin are multiplied by (YaRN), else 1

class RotaryTable {
 public:
  RotaryTable() = default;
  RotaryTable(const ModelConfig& config, c10::Device device, c10::ScalarType dtype);
  void reserve(int64_t positions);  // grows the tables to cover positions [0, n)
  // positions [B, T] -> cos and signed sin [B, T, 1, D], ready to broadcast over heads. The sin table's first half is
  // negated (the sign rotate_half gives those elements), so apply_rotary needs no negation.
  std::pair<at::Tensor, at::Tensor> lookup(const at::Tensor& positions) const;
  int64_t size() const;
  const at::Tensor& cos() const { return cos_; }                // [n, D] in the model dtype
  const at::Tensor& signed_sin() const { return signed_sin_; }  // [n, D], the first half negated

 private:
  at::Tensor inv_freq_;  // [D/2] float32 on the device
  double attention_factor_ = 1.0;
  at::Tensor cos_, signed_sin_;  // [n, D] in the model dtype
  c10::ScalarType dtype_ = c10::kFloat;
};

// x [B, T, H, D] rotated by cos and signed sin [B, T, 1, D] (RotaryTable::lookup).
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin);

}  // namespace crucible::lm

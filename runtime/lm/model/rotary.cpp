#include "lm/model/rotary.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace crucible::lm {

namespace {

// The dimension (of `dim`) whose wavelength turns `rotations` times over `context` positions.
double yarn_correction_dim(double rotations, int64_t dim, double base, double context) {
  return static_cast<double>(dim) * std::log(context / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

// YaRN, in transformers' float32 order: dimensions below the ramp keep their frequency (extrapolated), those above
// it are divided by `factor` (interpolated), a linear ramp between.
at::Tensor yarn_frequencies(const at::Tensor& inv_freq, const YarnRopeScaling& y, int64_t dim, double base) {
  double low = yarn_correction_dim(y.beta_fast, dim, base, y.original_max_position_embeddings);
  double high = yarn_correction_dim(y.beta_slow, dim, base, y.original_max_position_embeddings);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // a ramp of zero width would divide by zero
  const auto ramp = ((at::arange(dim / 2, at::kLong).to(at::kFloat) - low) / (high - low)).clamp(0, 1);
  const auto extrapolation = 1 - ramp;
  const auto interpolated = inv_freq / y.factor;
  return interpolated * (1 - extrapolation) + inv_freq * extrapolation;
}

}  // namespace

double rope_attention_factor(const ModelConfig& config) { return config.yarn ? config.yarn->attention_factor : 1.0; }

at::Tensor rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  auto exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  auto inv_freq = 1.0 / at::pow(config.rope_theta, exponents);
  if (config.yarn) return yarn_frequencies(inv_freq, *config.yarn, dim, config.rope_theta);
  if (!config.rope_scaling) return inv_freq;

  // Llama-3: the same steps, in the same float32 order, as transformers' llama3 rope initialisation.
  const auto& s = *config.rope_scaling;
  const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = at::logical_not(wavelen < high_freq_wavelen) & at::logical_not(wavelen > low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

RotaryTable::RotaryTable(const ModelConfig& config, c10::Device device, c10::ScalarType dtype)
    : inv_freq_(rope_inverse_frequencies(config).to(device)), attention_factor_(rope_attention_factor(config)), dtype_(dtype) {
  reserve(std::min<int64_t>(config.max_position_embeddings, 4096));
}

void RotaryTable::reserve(int64_t positions) {
  if (positions <= size()) return;
  const int64_t n = (positions + 1023) / 1024 * 1024;
  auto pos = at::arange(n, inv_freq_.options().dtype(at::kLong)).to(at::kFloat);
  auto freqs = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);
  // YaRN scales cos and sin (in float32, before rounding) by its attention factor; 1 otherwise.
  const auto sin = freqs.sin() * attention_factor_;
  cos_ = (at::cat({freqs, freqs}, -1).cos() * attention_factor_).to(dtype_);
  // rotate_half's negation folded into the table's first half: one kernel less per layer, the same values.
  signed_sin_ = at::cat({-sin, sin}, -1).to(dtype_);
}

int64_t RotaryTable::size() const { return cos_.defined() ? cos_.size(0) : 0; }

std::pair<at::Tensor, at::Tensor> RotaryTable::lookup(const at::Tensor& positions) const {
  const auto flat = positions.reshape({-1});
  const auto shape = std::vector<int64_t>{positions.size(0), positions.size(1), 1, cos_.size(1)};
  return {cos_.index_select(0, flat).view(shape), signed_sin_.index_select(0, flat).view(shape)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  const int64_t half = x.size(-1) / 2;
  auto swapped = at::cat({x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + swapped * signed_sin;  // x * cos + rotate_half(x) * sin, rounded as transformers rounds it
}

}  // namespace crucible::lm

#pragma once
// Tiny random Qwen3 and gpt-oss model directories (every structural feature, a few hundred parameters a matrix),
// and a plain reference forward pass written from the architectures' definitions, one op at a time, sharing no
// code with the model: the CPU tests compare the two; the GPU node compares the model with transformers.
#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "lm/format/safetensors.h"
#include "lm/model/mxfp4.h"
#include "lm/model/torch_tensors.h"
#include "support.h"

namespace crucible::test {

using Weights = std::map<std::string, at::Tensor>;

struct TinyModel {
  nlohmann::json config;
  Weights weights;  // float32, experts dense in transformers' [E, in, out] layout
};

inline at::Tensor random(std::vector<int64_t> shape, double scale, at::Generator& g) {
  return at::randn(shape, g, at::kFloat) * scale;
}

// Values an MXFP4 block holds exactly: e2m1 codes times a power of two per 32 values, with random codes and scales.
inline at::Tensor mxfp4_exact(std::vector<int64_t> shape, at::Generator& g, int64_t low_exponent, int64_t high_exponent) {
  const auto lut = at::tensor(std::vector<float>(lm::kMxfp4Values.begin(), lm::kMxfp4Values.end()));
  const auto codes = at::randint(0, 16, shape, g, at::kLong);
  auto block_shape = shape;
  block_shape.back() /= lm::kMxfp4BlockSize;
  const auto exponents = at::randint(low_exponent, high_exponent, block_shape, g, at::kLong).to(at::kFloat);
  return lut.index({codes}) * at::exp2(exponents).repeat_interleave(lm::kMxfp4BlockSize, -1);
}

// head_dim 32 or more (a multiple of 32): decode steps on a GPU take the fused rotation with its per-head norms.
inline TinyModel tiny_qwen3(uint64_t seed = 1, int64_t D = 16) {
  auto g = at::detail::createCPUGenerator(seed);
  const int64_t V = 48, Hd = 32, I = 40, L = 2, H = 4, Hkv = 2;
  TinyModel m;
  m.config = {{"model_type", "qwen3"},     {"vocab_size", V},        {"hidden_size", Hd},   {"intermediate_size", I},
              {"num_hidden_layers", L},    {"num_attention_heads", H}, {"num_key_value_heads", Hkv},
              {"head_dim", D},             {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000.0},     {"attention_bias", false}, {"tie_word_embeddings", true},
              {"use_sliding_window", false}, {"eos_token_id", 0}};
  auto& w = m.weights;
  w["model.embed_tokens.weight"] = random({V, Hd}, 1.0, g);
  w["model.norm.weight"] = 1 + random({Hd}, 0.1, g);
  for (int64_t i = 0; i < L; ++i) {
    const auto p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = 1 + random({Hd}, 0.1, g);
    w[p + "post_attention_layernorm.weight"] = 1 + random({Hd}, 0.1, g);
    w[p + "self_attn.q_proj.weight"] = random({H * D, Hd}, 0.2, g);
    w[p + "self_attn.k_proj.weight"] = random({Hkv * D, Hd}, 0.2, g);
    w[p + "self_attn.v_proj.weight"] = random({Hkv * D, Hd}, 0.2, g);
    w[p + "self_attn.o_proj.weight"] = random({Hd, H * D}, 0.2, g);
    // Norm weights far from one: a model that skipped them would give other logits.
    w[p + "self_attn.q_norm.weight"] = 1 + random({D}, 0.5, g);
    w[p + "self_attn.k_norm.weight"] = 1 + random({D}, 0.5, g);
    w[p + "mlp.gate_proj.weight"] = random({I, Hd}, 0.2, g);
    w[p + "mlp.up_proj.weight"] = random({I, Hd}, 0.2, g);
    w[p + "mlp.down_proj.weight"] = random({Hd, I}, 0.2, g);
  }
  return m;
}

// Two layers (the first sliding, window 3), four experts with two per token, sinks, gpt-oss's YaRN (its ramp inside
// the 8 frequencies of a 16-wide head), untied unembedding, expert weights MXFP4-exact. `wide_heads`: 8 query heads
// of 64, 2 a key head: heads the decode step's tensor-core attention takes at batch 1.
inline TinyModel tiny_gpt_oss(uint64_t seed = 2, bool wide_heads = false) {
  auto g = at::detail::createCPUGenerator(seed);
  const int64_t V = 48, Hd = 64, I = 32, L = 2, E = 4;
  const int64_t H = wide_heads ? 8 : 4, Hkv = wide_heads ? 4 : 2, D = wide_heads ? 64 : 16;
  TinyModel m;
  m.config = {{"model_type", "gpt_oss"}, {"vocab_size", V}, {"hidden_size", Hd}, {"intermediate_size", I},
              {"num_hidden_layers", L}, {"num_attention_heads", H}, {"num_key_value_heads", Hkv}, {"head_dim", D},
              {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5}, {"rope_theta", 150000.0},
              {"num_local_experts", E}, {"num_experts_per_tok", 2}, {"sliding_window", 3}, {"swiglu_limit", 7.0},
              {"layer_types", {"sliding_attention", "full_attention"}}, {"attention_bias", true},
              {"tie_word_embeddings", false}, {"eos_token_id", 0},
              {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                {"truncate", false}, {"original_max_position_embeddings", 4096}}}};
  auto& w = m.weights;
  w["model.embed_tokens.weight"] = random({V, Hd}, 1.0, g);
  w["model.norm.weight"] = 1 + random({Hd}, 0.1, g);
  w["lm_head.weight"] = random({V, Hd}, 0.3, g);
  for (int64_t i = 0; i < L; ++i) {
    const auto p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = 1 + random({Hd}, 0.1, g);
    w[p + "post_attention_layernorm.weight"] = 1 + random({Hd}, 0.1, g);
    for (auto [name, rows, cols] : {std::tuple{"q_proj", H * D, Hd}, {"k_proj", Hkv * D, Hd}, {"v_proj", Hkv * D, Hd},
                                    {"o_proj", Hd, H * D}}) {
      w[p + "self_attn." + name + ".weight"] = random({rows, cols}, 0.15, g);
      w[p + "self_attn." + name + ".bias"] = random({rows}, 0.1, g);
    }
    w[p + "self_attn.sinks"] = random({H}, 1.0, g);
    w[p + "mlp.router.weight"] = random({E, Hd}, 0.5, g);
    w[p + "mlp.router.bias"] = random({E}, 0.2, g);
    // Large enough that some gate and linear values pass the clamp at 7.
    w[p + "mlp.experts.gate_up_proj"] = mxfp4_exact({E, 2 * I, Hd}, g, -5, -2).transpose(1, 2).contiguous();
    w[p + "mlp.experts.gate_up_proj_bias"] = random({E, 2 * I}, 2.0, g);
    w[p + "mlp.experts.down_proj"] = mxfp4_exact({E, Hd, I}, g, -8, -5).transpose(1, 2).contiguous();
    w[p + "mlp.experts.down_proj_bias"] = random({E, Hd}, 0.1, g);
  }
  return m;
}

// The model written as a Hugging Face directory. With `mxfp4`, the experts are packed (Hugging Face's `_blocks` /
// `_scales` names, [E, out, in / 32, 16]) as the released gpt-oss checkpoints store them.
inline void write_model_dir(const TinyModel& m, const std::filesystem::path& dir, bool mxfp4 = false) {
  std::vector<lm::TensorBytes> tensors;
  for (const auto& [name, t] : m.weights) {
    const bool expert = name.size() > 5 && name.find("mlp.experts.") != std::string::npos &&
                        name.substr(name.size() - 5) != "_bias";
    if (mxfp4 && expert) {
      const auto packed = lm::mxfp4_encode(t.transpose(1, 2));  // [E, out, in]
      tensors.push_back(lm::tensor_to_bytes(name + "_blocks", packed.blocks));
      tensors.push_back(lm::tensor_to_bytes(name + "_scales", packed.scales));
    } else {
      tensors.push_back(lm::tensor_to_bytes(name, t));
    }
  }
  lm::write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  auto config = m.config;
  if (mxfp4) config["quantization_config"] = {{"quant_method", "mxfp4"}};
  write_file(dir / "config.json", config.dump(2));
}

// ---- the reference forward pass ----

inline at::Tensor ref_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// Inverse frequencies: plain, or YaRN from its definition (openai/gpt-oss's ntk-by-parts, in doubles).
inline std::pair<at::Tensor, double> ref_inverse_frequencies(const nlohmann::json& c) {
  const int64_t D = c["head_dim"];
  const double base = c["rope_theta"];
  std::vector<double> inv(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv[i] = 1.0 / std::pow(base, 2.0 * i / D);
  double concentration = 1.0;
  if (c.contains("rope_scaling")) {
    const auto& r = c["rope_scaling"];
    const double factor = r["factor"], ctx = r["original_max_position_embeddings"];
    const double beta = r["beta_fast"], alpha = r["beta_slow"];
    concentration = 0.1 * std::log(factor) + 1.0;
    const double half = D / 2.0;
    const double low = half * std::log(ctx / (beta * 2 * M_PI)) / std::log(base);
    const double high = half * std::log(ctx / (alpha * 2 * M_PI)) / std::log(base);
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double keep = 1 - ramp;  // 1: the frequency as trained, 0: interpolated by the factor
      inv[i] = inv[i] / factor * (1 - keep) + inv[i] * keep;
    }
  }
  return {at::tensor(inv, at::kDouble).to(at::kFloat), concentration};
}

inline at::Tensor ref_rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto halves = x.chunk(2, -1);  // [B, H, T, D/2] each
  return at::cat({halves[0] * cos - halves[1] * sin, halves[1] * cos + halves[0] * sin}, -1);
}

inline at::Tensor ref_experts(const Weights& w, const std::string& p, const nlohmann::json& c, const at::Tensor& x) {
  const int64_t E = c["num_local_experts"], k = c["num_experts_per_tok"];
  const double limit = c["swiglu_limit"];
  const auto logits = at::linear(x, w.at(p + "mlp.router.weight"), w.at(p + "mlp.router.bias"));
  const auto top = at::topk(logits, k, -1);
  const auto scores = at::zeros_like(logits).scatter(-1, std::get<1>(top), at::softmax(std::get<0>(top), -1));
  auto out = at::zeros_like(x);
  for (int64_t e = 0; e < E; ++e) {  // every expert on every token, weighted by its score (zero when not chosen)
    const auto gu = at::matmul(x, w.at(p + "mlp.experts.gate_up_proj")[e]) + w.at(p + "mlp.experts.gate_up_proj_bias")[e];
    const auto idx = at::arange(gu.size(-1) / 2, at::kLong) * 2;
    const auto gate = gu.index_select(-1, idx).clamp_max(limit);
    const auto lin = gu.index_select(-1, idx + 1).clamp(-limit, limit);
    const auto h = (lin + 1) * gate * at::sigmoid(gate * 1.702);
    const auto y = at::matmul(h, w.at(p + "mlp.experts.down_proj")[e]) + w.at(p + "mlp.experts.down_proj_bias")[e];
    out = out + y * scores.select(-1, e).unsqueeze(-1);
  }
  return out;
}

// tokens [T] -> logits [T, V], float32, no cache: every query against every key at once, with the masks built from
// positions.
inline at::Tensor reference_logits(const TinyModel& m, const std::vector<int64_t>& ids) {
  const auto& c = m.config;
  const auto& w = m.weights;
  const int64_t T = ids.size(), H = c["num_attention_heads"], Hkv = c["num_key_value_heads"], D = c["head_dim"];
  const double eps = c["rms_norm_eps"];
  const bool gpt_oss = c["model_type"] == "gpt_oss";
  auto x = w.at("model.embed_tokens.weight").index_select(0, at::tensor(ids, at::kLong));  // [T, hidden]
  const auto [inv, concentration] = ref_inverse_frequencies(c);
  const auto angles = at::arange(T, at::kLong).to(at::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  const auto cos = angles.cos() * concentration, sin = angles.sin() * concentration;  // [T, D/2]
  const auto pos = at::arange(T, at::kLong);
  for (int64_t i = 0; i < static_cast<int64_t>(c["num_hidden_layers"]); ++i) {
    const auto p = "model.layers." + std::to_string(i) + ".";
    const auto bias = [&](const std::string& n) { return gpt_oss ? w.at(p + n + ".bias") : at::Tensor(); };
    const auto h = ref_rms_norm(x, w.at(p + "input_layernorm.weight"), eps);
    auto q = at::linear(h, w.at(p + "self_attn.q_proj.weight"), bias("self_attn.q_proj")).view({T, H, D}).transpose(0, 1);
    auto k = at::linear(h, w.at(p + "self_attn.k_proj.weight"), bias("self_attn.k_proj")).view({T, Hkv, D}).transpose(0, 1);
    auto v = at::linear(h, w.at(p + "self_attn.v_proj.weight"), bias("self_attn.v_proj")).view({T, Hkv, D}).transpose(0, 1);
    if (!gpt_oss) {
      q = ref_rms_norm(q, w.at(p + "self_attn.q_norm.weight"), eps);
      k = ref_rms_norm(k, w.at(p + "self_attn.k_norm.weight"), eps);
    }
    q = ref_rotate(q, cos, sin);
    k = ref_rotate(k, cos, sin).repeat_interleave(H / Hkv, 0);
    v = v.repeat_interleave(H / Hkv, 0);
    auto scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(D));  // [H, T, T]
    auto allowed = pos.unsqueeze(0) <= pos.unsqueeze(1);
    if (gpt_oss && c["layer_types"][i] == "sliding_attention")
      allowed = allowed & (pos.unsqueeze(1) - pos.unsqueeze(0) < static_cast<int64_t>(c["sliding_window"]));
    scores = scores.masked_fill(at::logical_not(allowed), -INFINITY);
    at::Tensor probs;
    if (gpt_oss) {
      const auto sinks = w.at(p + "self_attn.sinks").view({H, 1, 1}).expand({H, T, 1});
      probs = at::softmax(at::cat({scores, sinks}, -1), -1).narrow(-1, 0, T);
    } else {
      probs = at::softmax(scores, -1);
    }
    const auto attn = at::matmul(probs, v).transpose(0, 1).reshape({T, H * D});
    x = x + at::linear(attn, w.at(p + "self_attn.o_proj.weight"), bias("self_attn.o_proj"));
    const auto h2 = ref_rms_norm(x, w.at(p + "post_attention_layernorm.weight"), eps);
    if (gpt_oss) {
      x = x + ref_experts(w, p, c, h2);
    } else {
      const auto gate = at::linear(h2, w.at(p + "mlp.gate_proj.weight"));
      const auto up = at::linear(h2, w.at(p + "mlp.up_proj.weight"));
      x = x + at::linear(at::silu(gate) * up, w.at(p + "mlp.down_proj.weight"));
    }
  }
  const auto head = gpt_oss ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
  return at::linear(ref_rms_norm(x, w.at("model.norm.weight"), eps), head);
}

}  // namespace crucible::test

#include "lm/format/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lm/format/safetensors.h"

namespace crucible::lm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& why) {
  throw ModelFormatError(source + ": " + why);
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError(path.string() + ": cannot read (is this a Hugging Face model directory?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
T required(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) fail(source, "missing key '" + key + "'");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(source, "key '" + key + "' has the wrong type");
  }
}

template <typename T>
std::optional<T> optional_key(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(source, "key '" + key + "' has the wrong type");
  }
}

// eos_token_id is an int or a list of ints.
std::vector<int64_t> token_ids(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return {};
  if (j[key].is_number_integer()) return {j[key].get<int64_t>()};
  if (j[key].is_array()) return required<std::vector<int64_t>>(j, key, source);
  fail(source, "key '" + key + "' must be an integer or a list of integers");
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    auto j = json::parse(text);
    if (!j.is_object()) fail(source, "not a JSON object");
    return j;
  } catch (const json::parse_error& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
}

double yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

// YaRN's keys, with transformers' defaults: beta_fast 32, beta_slow 1, the attention factor from the mscales (or
// 0.1 ln(factor) + 1), the original context from max_position_embeddings.
YarnRopeScaling read_yarn(const json& rope, const std::string& source, const ModelConfig& c) {
  YarnRopeScaling y;
  y.original_max_position_embeddings = optional_key<double>(rope, "original_max_position_embeddings", source)
                                           .value_or(static_cast<double>(c.max_position_embeddings));
  y.factor = optional_key<double>(rope, "factor", source)
                 .value_or(static_cast<double>(c.max_position_embeddings) / y.original_max_position_embeddings);
  y.beta_fast = optional_key<double>(rope, "beta_fast", source).value_or(32.0);
  y.beta_slow = optional_key<double>(rope, "beta_slow", source).value_or(1.0);
  y.truncate = optional_key<bool>(rope, "truncate", source).value_or(true);
  const auto mscale = optional_key<double>(rope, "mscale", source);
  const auto mscale_all_dim = optional_key<double>(rope, "mscale_all_dim", source);
  if (const auto given = optional_key<double>(rope, "attention_factor", source))
    y.attention_factor = *given;
  else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0)
    y.attention_factor = yarn_mscale(y.factor, *mscale) / yarn_mscale(y.factor, *mscale_all_dim);
  else
    y.attention_factor = yarn_mscale(y.factor, 1.0);
  if (!(y.factor > 0) || !(y.original_max_position_embeddings > 0) || !(y.beta_fast > 0) || !(y.beta_slow > 0))
    fail(source, "yarn rope: factor, original_max_position_embeddings, beta_fast and beta_slow must be positive");
  return y;
}

Llama3RopeScaling read_llama3(const json& rope, const std::string& source) {
  Llama3RopeScaling s;
  s.factor = required<double>(rope, "factor", source);
  s.low_freq_factor = required<double>(rope, "low_freq_factor", source);
  s.high_freq_factor = required<double>(rope, "high_freq_factor", source);
  s.original_max_position_embeddings = required<double>(rope, "original_max_position_embeddings", source);
  if (s.high_freq_factor <= s.low_freq_factor) fail(source, "llama3 rope: high_freq_factor must exceed low_freq_factor");
  return s;
}

// Rope settings: older configs carry rope_theta + rope_scaling, transformers 5 writes rope_parameters.
void read_rope(const json& j, const std::string& source, ModelConfig& c) {
  json rope = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"]
              : j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"]
                                                                            : json::object();
  c.rope_theta = optional_key<double>(j, "rope_theta", source)
                     .value_or(optional_key<double>(rope, "rope_theta", source).value_or(10000.0));
  std::string type = optional_key<std::string>(rope, "rope_type", source)
                         .value_or(optional_key<std::string>(rope, "type", source).value_or("default"));
  if (type == "default") return;
  if (type == "llama3") {
    c.rope_scaling = read_llama3(rope, source);
  } else if (type == "yarn") {
    c.yarn = read_yarn(rope, source, c);
  } else {
    fail(source, "rope type '" + type + "' is not supported (supported: default, llama3, yarn)");
  }
}

Architecture architecture_named(const std::string& model_type, const std::string& source) {
  if (model_type == "qwen2") return Architecture::qwen2;
  if (model_type == "llama") return Architecture::llama;
  if (model_type == "qwen3") return Architecture::qwen3;
  if (model_type == "gpt_oss") return Architecture::gpt_oss;
  fail(source, "model_type '" + model_type + "' is not supported (supported: qwen2, llama, qwen3, gpt_oss)");
}

AttentionKind attention_kind_named(const std::string& name, const std::string& source) {
  if (name == "full_attention") return AttentionKind::full;
  if (name == "sliding_attention") return AttentionKind::sliding;
  fail(source, "layer_types entry '" + name + "' is not supported (supported: full_attention, sliding_attention)");
}

// Which layers slide. gpt-oss: layer_types, or (older configs) even layers sliding and odd ones full. The other
// families run full attention only: their sliding-window variants are refused.
void read_layer_types(const json& j, const std::string& source, ModelConfig& c) {
  const bool gpt_oss = c.architecture == Architecture::gpt_oss;
  if (!gpt_oss && optional_key<bool>(j, "use_sliding_window", source).value_or(false))
    fail(source, "sliding-window attention is not supported for " + c.model_type + " (use_sliding_window is true)");
  const auto names = optional_key<std::vector<std::string>>(j, "layer_types", source);
  if (names && static_cast<int64_t>(names->size()) != c.num_layers)
    fail(source, "layer_types has " + std::to_string(names->size()) + " entries for " + std::to_string(c.num_layers) +
                     " layers");
  c.layer_types.assign(static_cast<std::size_t>(std::max<int64_t>(c.num_layers, 0)), AttentionKind::full);
  for (std::size_t i = 0; i < c.layer_types.size(); ++i)
    c.layer_types[i] = names ? attention_kind_named((*names)[i], source)
                       : gpt_oss && i % 2 == 0 ? AttentionKind::sliding
                                               : AttentionKind::full;
  const bool slides = std::find(c.layer_types.begin(), c.layer_types.end(), AttentionKind::sliding) != c.layer_types.end();
  if (!slides) return;
  if (!gpt_oss) fail(source, "sliding-window attention is not supported for " + c.model_type + " (layer_types)");
  c.sliding_window = required<int64_t>(j, "sliding_window", source);
  if (c.sliding_window <= 0) fail(source, "key 'sliding_window' must be positive");
}

// gpt-oss's experts: both spellings of the per-token count (the original checkpoint's experts_per_token, the
// transformers config's num_experts_per_tok).
void read_moe(const json& j, const std::string& source, ModelConfig& c) {
  MoeConfig m;
  m.num_experts = required<int64_t>(j, "num_local_experts", source);
  const auto per_token = optional_key<int64_t>(j, "num_experts_per_tok", source);
  m.experts_per_token = per_token ? *per_token : required<int64_t>(j, "experts_per_token", source);
  m.swiglu_limit = optional_key<double>(j, "swiglu_limit", source).value_or(7.0);
  m.swiglu_alpha = optional_key<double>(j, "swiglu_alpha", source).value_or(1.702);
  if (m.num_experts <= 0) fail(source, "key 'num_local_experts' must be positive");
  if (m.experts_per_token <= 0 || m.experts_per_token > m.num_experts)
    fail(source, "num_experts_per_tok must be between 1 and num_local_experts");
  if (!(m.swiglu_limit > 0)) fail(source, "key 'swiglu_limit' must be positive");
  if (!(m.swiglu_alpha > 0)) fail(source, "key 'swiglu_alpha' must be positive");
  c.moe = m;
}

// A quantised checkpoint: only gpt-oss's MXFP4 experts are read (the tensors say which are packed).
void check_quantization(const json& j, const std::string& source, const ModelConfig& c) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return;
  const auto& q = j["quantization_config"];
  if (!q.is_object()) fail(source, "key 'quantization_config' has the wrong type");
  const auto method = optional_key<std::string>(q, "quant_method", source).value_or("");
  if (method != "mxfp4" || c.architecture != Architecture::gpt_oss)
    fail(source, "quantization '" + method + "' is not supported (supported: mxfp4 experts of gpt_oss)");
}

// What each family implies beyond the shared keys.
void read_family(const json& j, const std::string& source, ModelConfig& c) {
  const auto attention_bias = optional_key<bool>(j, "attention_bias", source);
  switch (c.architecture) {
    case Architecture::qwen2:
      c.attention_bias = true;
      break;
    case Architecture::llama:
      c.attention_bias = c.o_bias = attention_bias.value_or(false);
      break;
    case Architecture::qwen3:
      c.attention_bias = c.o_bias = attention_bias.value_or(false);
      c.qk_norm = true;
      break;
    case Architecture::gpt_oss:
      c.attention_bias = c.o_bias = attention_bias.value_or(true);
      c.attention_sinks = true;
      read_moe(j, source, c);
      break;
  }
  read_layer_types(j, source, c);
  check_quantization(j, source, c);
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json(json_text, source);
  ModelConfig c;
  c.model_type = required<std::string>(j, "model_type", source);
  c.architecture = architecture_named(c.model_type, source);
  c.vocab_size = required<int64_t>(j, "vocab_size", source);
  c.hidden_size = required<int64_t>(j, "hidden_size", source);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", source);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", source);
  c.num_heads = required<int64_t>(j, "num_attention_heads", source);
  c.num_kv_heads = optional_key<int64_t>(j, "num_key_value_heads", source).value_or(c.num_heads);
  c.head_dim = optional_key<int64_t>(j, "head_dim", source).value_or(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = required<int64_t>(j, "max_position_embeddings", source);
  c.rms_norm_eps = optional_key<double>(j, "rms_norm_eps", source).value_or(1e-6);
  c.tie_word_embeddings = optional_key<bool>(j, "tie_word_embeddings", source).value_or(false);
  c.mlp_bias = optional_key<bool>(j, "mlp_bias", source).value_or(false);
  c.stored_dtype = optional_key<std::string>(j, "dtype", source)
                       .value_or(optional_key<std::string>(j, "torch_dtype", source).value_or(""));
  c.eos_token_ids = token_ids(j, "eos_token_id", source);
  c.bos_token_id = optional_key<int64_t>(j, "bos_token_id", source);
  read_rope(j, source, c);
  read_family(j, source, c);

  const auto act = optional_key<std::string>(j, "hidden_act", source).value_or("silu");
  if (act != "silu") fail(source, "hidden_act '" + act + "' is not supported (SwiGLU needs silu)");
  if (optional_key<int64_t>(j, "pretraining_tp", source).value_or(1) != 1)
    fail(source, "pretraining_tp other than 1 is not supported");
  for (auto [key, value] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                            {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
                            {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads},
                            {"head_dim", c.head_dim}})
    if (value <= 0) fail(source, std::string("key '") + key + "' must be positive");
  if (c.num_heads % c.num_kv_heads != 0)
    fail(source, "num_attention_heads must be a multiple of num_key_value_heads");
  if (c.head_dim % 2 != 0) fail(source, "head_dim must be even for rotary embeddings");
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  return parse_model_config(read_text(path), path.string());
}

GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "generation_config.json";
  GenerationDefaults g;
  if (!std::filesystem::exists(path)) return g;
  const auto source = path.string();
  const json j = parse_json(read_text(path), source);
  g.eos_token_ids = token_ids(j, "eos_token_id", source);
  g.temperature = optional_key<double>(j, "temperature", source);
  g.top_p = optional_key<double>(j, "top_p", source);
  g.top_k = optional_key<int64_t>(j, "top_k", source);
  g.do_sample = optional_key<bool>(j, "do_sample", source);
  g.max_new_tokens = optional_key<int64_t>(j, "max_new_tokens", source);
  return g;
}

}  // namespace crucible::lm

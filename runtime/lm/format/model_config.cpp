#include "lm/format/model_config.h"

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
  if (type != "llama3")
    fail(source, "rope type '" + type + "' is not supported (supported: default, llama3)");
  Llama3RopeScaling s;
  s.factor = required<double>(rope, "factor", source);
  s.low_freq_factor = required<double>(rope, "low_freq_factor", source);
  s.high_freq_factor = required<double>(rope, "high_freq_factor", source);
  s.original_max_position_embeddings = required<double>(rope, "original_max_position_embeddings", source);
  if (s.high_freq_factor <= s.low_freq_factor) fail(source, "llama3 rope: high_freq_factor must exceed low_freq_factor");
  c.rope_scaling = s;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json(json_text, source);
  ModelConfig c;
  c.model_type = required<std::string>(j, "model_type", source);
  if (c.model_type == "qwen2") {
    c.architecture = Architecture::qwen2;
  } else if (c.model_type == "llama") {
    c.architecture = Architecture::llama;
  } else {
    fail(source, "model_type '" + c.model_type + "' is not supported (supported: qwen2, llama)");
  }
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
  c.attention_bias = c.architecture == Architecture::qwen2 || optional_key<bool>(j, "attention_bias", source).value_or(false);
  c.mlp_bias = optional_key<bool>(j, "mlp_bias", source).value_or(false);
  c.stored_dtype = optional_key<std::string>(j, "dtype", source)
                       .value_or(optional_key<std::string>(j, "torch_dtype", source).value_or(""));
  c.eos_token_ids = token_ids(j, "eos_token_id", source);
  c.bos_token_id = optional_key<int64_t>(j, "bos_token_id", source);
  read_rope(j, source, c);

  const auto act = optional_key<std::string>(j, "hidden_act", source).value_or("silu");
  if (act != "silu") fail(source, "hidden_act '" + act + "' is not supported (SwiGLU needs silu)");
  if (optional_key<bool>(j, "use_sliding_window", source).value_or(false))
    fail(source, "sliding-window attention is not supported (use_sliding_window is true)");
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

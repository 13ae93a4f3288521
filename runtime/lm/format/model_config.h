#pragma once
// A Hugging Face model directory's config.json and generation_config.json, for the decoder-only families
// Crucible runs: Qwen2 / Qwen2.5 (model_type "qwen2") and Llama 2/3 (model_type "llama").
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace crucible::lm {

enum class Architecture { qwen2, llama };

// Llama-3's rope scaling ("rope_type": "llama3"): long wavelengths are stretched by `factor`, short ones kept,
// the band between them interpolated.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::qwen2;
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q, k, v projections (Qwen2 always has them)
  bool mlp_bias = false;
  std::string stored_dtype;      // "float32", "bfloat16", ... as the config says (informational)
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
};

// Sampling defaults a model directory may carry (generation_config.json); absent keys stay unset.
struct GenerationDefaults {
  std::vector<int64_t> eos_token_ids;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<bool> do_sample;
  std::optional<int64_t> max_new_tokens;
};

// Throws ModelFormatError naming the file and key for a missing key, a wrong type, or an unsupported
// architecture / activation / rope type / sliding-window attention.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source = "config.json");
ModelConfig load_model_config(const std::filesystem::path& model_dir);
GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir);  // empty when the file is absent

}  // namespace crucible::lm

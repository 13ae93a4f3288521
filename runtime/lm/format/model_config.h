#pragma once
// A Hugging Face model directory's config.json and generation_config.json, for the decoder-only families
// Crucible runs: Qwen2 / Qwen2.5 ("qwen2"), Llama 2/3 ("llama"), Qwen3 dense ("qwen3") and gpt-oss ("gpt_oss").
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace crucible::lm {

enum class Architecture { qwen2, llama, qwen3, gpt_oss };

// Which keys a layer's attention may see: every earlier one, or only the last `sliding_window` positions.
enum class AttentionKind { full, sliding };

// Llama-3's rope scaling ("rope_type": "llama3"): long wavelengths are stretched by `factor`, short ones kept,
// the band between them interpolated.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

// YaRN ("rope_type": "yarn", gpt-oss): wavelengths longer than the original context are interpolated by `factor`,
// short ones kept, a linear ramp between the beta_fast and beta_slow rotation counts; cos and sin are multiplied by
// `attention_factor` (0.1 ln(factor) + 1 unless the config names it).
struct YarnRopeScaling {
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double original_max_position_embeddings = 4096;
  double attention_factor = 1.0;
  bool truncate = true;  // round the ramp's ends to whole dimensions (transformers' default; gpt-oss says false)
};

// gpt-oss's mixture of experts: a biased router picks `experts_per_token` of `num_experts`; each expert is a
// clamped SwiGLU (gate and linear columns interleaved) with biases.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
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
  std::optional<YarnRopeScaling> yarn;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q, k, v projections (Qwen2 always has them)
  bool o_bias = false;          // the output projection (Llama with attention_bias, gpt-oss)
  bool mlp_bias = false;
  bool qk_norm = false;          // Qwen3: RMSNorm over each head's query and key before rotation
  bool attention_sinks = false;  // gpt-oss: a learned logit per head joins each softmax and is dropped
  int64_t sliding_window = 0;    // keys a sliding layer's query sees, itself included (0: none)
  std::vector<AttentionKind> layer_types;  // one per layer (all full without sliding windows)
  std::optional<MoeConfig> moe;           // gpt-oss; dense MLPs otherwise
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
// architecture / activation / rope type / attention layout.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source = "config.json");
ModelConfig load_model_config(const std::filesystem::path& model_dir);
GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir);  // empty when the file is absent

}  // namespace crucible::lm

#pragma once
// A Hugging Face model directory ready to use: model, tokenizer, generation defaults and chat format, behind
// plain types (no torch in this header), for policies, the CLI and tools.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/format/model_config.h"
#include "lm/generation/sampling_params.h"
#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/tokenizer/chat_template.h"

namespace crucible::lm {

struct LanguageModelOptions {
  std::string device = "cpu";  // "cpu" or "cuda:N"
  std::string dtype = "auto";   // auto (float32 on the CPU, bfloat16 on CUDA), f32, bf16, f16
  bool cuda_graphs = true;
  int64_t max_batch = 0;  // rows decoded at once; more requests join as rows finish (0: one row per request)
  // The chat format to render prompts in; empty: the model's (chat_format_for_model: harmony for gpt_oss, qwen3 for
  // qwen3, else what the tokenizer's tokens say). A format whose stop tokens the tokenizer lacks is refused.
  std::optional<ChatFormat> chat_format;
  // Benchmarks: the weights drawn with this seed at the config's shapes instead of read (LoadOptions::random_seed).
  std::optional<uint64_t> random_weights;
};

// Unset sampling values fall back to the directory's generation_config.json, then to temperature 1, no top-p/k.
struct TextRequest {
  std::string prompt;  // already rendered (see LanguageModel::chat_prompt); special tokens in it are parsed
  // When not empty, the prompt already encoded (LanguageModel::encode_chat), and `prompt` is not used.
  std::vector<int32_t> prompt_tokens;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  int64_t max_new_tokens = 256;
  std::vector<std::string> stop_strings;
  bool stop_at_eos = true;  // the model's EOS ids and the chat format's end-of-turn token
};

struct TextCompletion {
  std::string text;
  std::vector<int32_t> prompt_tokens, tokens;
  std::vector<float> sampling_logprobs, model_logprobs;
  std::string finish_reason;  // stop_token, stop_string, length, cancelled
};

// Text requests for a batch that is already decoding, and text completions as each row finishes (the generator's
// RequestFeed in text; ids number the first requests from 0, then more()'s in order).
class TextFeed {
 public:
  virtual ~TextFeed() = default;
  // Requests waiting now, possibly none; each must pass LanguageModel::check.
  virtual std::vector<TextRequest> more() = 0;
  virtual void finished(std::size_t id, TextCompletion completion) = 0;
  // Whether more() may ever return a request (RequestFeed::may_add).
  virtual bool may_add() const { return true; }
  // Whether request `id`'s caller has gone: its row stops at the next step (RequestFeed::cancelled).
  virtual bool cancelled(std::size_t /*id*/) const { return false; }
};

class Transformer;
class LoraAdapter;
struct LoraConfig;

class LanguageModel {
 public:
  // Throws ModelFormatError (model files) or std::runtime_error (tokenizer) with the path and the reason.
  static LanguageModel load(const std::filesystem::path& model_dir, const LanguageModelOptions& options = {});
  // A second model over this one's weights, which both read and neither changes (adapters are added in each pass or
  // folded into a copy): no second copy of the weights in memory. Its adapter, caches and CUDA graphs are its own, so
  // the two may run on different threads at once. The weights live as long as either model. Make it while this
  // model is idle (its rotary tables are copied).
  LanguageModel sharing_weights() const;
  ~LanguageModel();
  LanguageModel(LanguageModel&&) noexcept;
  LanguageModel& operator=(LanguageModel&&) noexcept;

  // The conversation rendered in the tokenizer's chat format, ending with the assistant header.
  std::string chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const;
  // The conversation's tokens, rendered as chat_prompt does: special tokens only where the chat format writes them;
  // those typed in a message (its content or role) are plain text unless `specials_in_content`, so that a message
  // cannot open or close a turn. Throws std::invalid_argument for invalid UTF-8.
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options = {},
                                   bool specials_in_content = false) const;
  // One user turn with a system prompt (empty: the chat format's default), as chat_prompt renders it.
  std::string user_prompt(const std::string& text, const std::string& system_prompt = "") const;
  std::vector<TextCompletion> generate(const std::vector<TextRequest>& requests);
  // Continuous batching across callers: decodes `requests` and what `feed` adds while rows are busy, handing each
  // completion to `feed` as its row finishes.
  void generate(const std::vector<TextRequest>& requests, TextFeed& feed);
  // Throws std::invalid_argument for a request generate() would refuse (a prompt and budget past the model's
  // positions, a token outside the vocabulary, a bad top_p), without decoding anything.
  void check(const TextRequest& request) const;
  // A prompt's tokens with the post-processor's prefix (Llama-3's <|begin_of_text|>) exactly once, also when
  // the text is a rendered chat prompt that already starts with it.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // Teacher-forced log p(token t | tokens before it) for t >= 1 of each sequence.
  std::vector<std::vector<float>> score(const std::vector<std::vector<int32_t>>& sequences) const;

  const ModelConfig& config() const;
  const GenerationDefaults& generation_defaults() const;
  const Tokenizer& tokenizer() const;

  // A LoRA adapter applied to every forward pass from now on: loaded in PEFT's format, or fresh.
  void load_adapter(const std::filesystem::path& dir);
  LoraAdapter& new_adapter(const LoraConfig& config, uint64_t seed);
  LoraAdapter* adapter();
  const Transformer& transformer() const;
  std::optional<ChatFormat> chat_format() const;
  std::vector<int64_t> stop_token_ids() const;
  // The chat format's end-of-turn token (<|im_end|>, <|eot_id|>, harmony's <|return|>), when the tokenizer has one.
  std::optional<int32_t> end_of_turn_id() const;

 private:
  LanguageModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crucible::lm

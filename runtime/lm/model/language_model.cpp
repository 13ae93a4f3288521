#include "lm/model/language_model.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

#include "lm/generation/generator.h"
#include "lm/model/lora.h"
#include "lm/model/transformer.h"
#include "lm/tokenizer/chat_reply.h"

namespace crucible::lm {

struct LanguageModel::Impl {
  Transformer model;
  Tokenizer tokenizer;
  GenerationDefaults defaults;
  std::optional<ChatFormat> format;
  std::unique_ptr<Generator> generator;
  std::unique_ptr<LoraAdapter> adapter;
  GeneratorOptions generator_options;

  void start_generator() {
    generator = std::make_unique<Generator>(
        model, [&tok = tokenizer](int64_t id) { return tok.decode_bytes({static_cast<TokenId>(id)}); },
        generator_options);
  }
};

namespace {

c10::ScalarType parse_dtype_option(const std::string& dtype, const c10::Device& device) {
  if (dtype == "auto") return device.is_cuda() ? c10::kBFloat16 : c10::kFloat;
  if (dtype == "f32" || dtype == "float32") return c10::kFloat;
  if (dtype == "bf16" || dtype == "bfloat16") return c10::kBFloat16;
  if (dtype == "f16" || dtype == "float16") return c10::kHalf;
  throw std::invalid_argument("unknown dtype '" + dtype + "' (auto, f32, bf16, f16)");
}

// The configured format, which the tokenizer must be able to end a reply in, or the model's own; none for a base model
// whose tokenizer has no chat tokens (raw prompts only).
std::optional<ChatFormat> chosen_chat_format(const std::optional<ChatFormat>& configured, const std::string& model_type,
                                             const Tokenizer& tokenizer) {
  if (configured) {
    for (const std::string& stop : reply_stop_tokens(*configured))
      if (!tokenizer.token_to_id(stop))
        throw std::invalid_argument("chat format " + std::string(chat_format_name(*configured)) +
                                    ": the tokenizer has no " + stop + " token");
    return configured;
  }
  try {
    return chat_format_for_model(model_type, tokenizer);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool starts_with(const std::vector<TokenId>& ids, const std::vector<TokenId>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

}  // namespace

LanguageModel::LanguageModel() : impl_(nullptr) {}
LanguageModel::~LanguageModel() = default;
LanguageModel::LanguageModel(LanguageModel&&) noexcept = default;
LanguageModel& LanguageModel::operator=(LanguageModel&&) noexcept = default;

LanguageModel LanguageModel::load(const std::filesystem::path& model_dir, const LanguageModelOptions& options) {
  LoadOptions load;
  try {
    load.device = c10::Device(options.device);
  } catch (const std::exception&) {
    throw std::invalid_argument("unknown device '" + options.device + "' (cpu or cuda:N)");
  }
  load.dtype = parse_dtype_option(options.dtype, load.device);
  load.random_seed = options.random_weights;
  if (load.device.is_cpu() && at::get_num_threads() < 2)
    at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  LanguageModel lm;
  lm.impl_.reset(new Impl{Transformer::load(model_dir, load), Tokenizer::from_file((model_dir / "tokenizer.json").string()),
                          load_generation_defaults(model_dir), std::nullopt, nullptr, nullptr});
  lm.impl_->format = chosen_chat_format(options.chat_format, lm.impl_->model.config().model_type, lm.impl_->tokenizer);
  auto& impl = *lm.impl_;
  impl.generator_options.cuda_graphs = options.cuda_graphs;
  impl.generator_options.max_batch = options.max_batch;
  impl.start_generator();
  return lm;
}

LanguageModel LanguageModel::sharing_weights() const {
  const Impl& from = *impl_;
  LanguageModel lm;
  lm.impl_.reset(new Impl{from.model.sharing_weights(), from.tokenizer, from.defaults, from.format, nullptr, nullptr,
                          from.generator_options});
  lm.impl_->start_generator();
  return lm;
}

std::string LanguageModel::chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  if (!impl_->format) throw std::runtime_error("this tokenizer has no known chat format (ChatML, Llama-3 or harmony)");
  return render_chat(*impl_->format, messages, options);
}

std::string LanguageModel::user_prompt(const std::string& text, const std::string& system_prompt) const {
  ChatOptions options;
  if (!system_prompt.empty()) options.system_prompt = system_prompt;
  return chat_prompt({{"user", text}}, options);
}

std::optional<int32_t> LanguageModel::end_of_turn_id() const {
  if (!impl_->format) return std::nullopt;
  return impl_->tokenizer.token_to_id(reply_stop_tokens(*impl_->format).front());
}

std::vector<int64_t> LanguageModel::stop_token_ids() const {
  std::vector<int64_t> ids = impl_->model.config().eos_token_ids;
  ids.insert(ids.end(), impl_->defaults.eos_token_ids.begin(), impl_->defaults.eos_token_ids.end());
  if (impl_->format)  // harmony has two: <|return|> and a tool call's <|call|>
    for (const std::string& stop : reply_stop_tokens(*impl_->format))
      if (auto id = impl_->tokenizer.token_to_id(stop)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> LanguageModel::encode_prompt(const std::string& text) const {
  const auto prefix = impl_->tokenizer.encode("", /*add_special_tokens=*/true);
  auto ids = impl_->tokenizer.encode(text, /*add_special_tokens=*/false);
  if (!starts_with(ids, prefix)) ids.insert(ids.begin(), prefix.begin(), prefix.end());
  return ids;
}

std::vector<int32_t> LanguageModel::encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options,
                                                bool specials_in_content) const {
  if (specials_in_content) return encode_prompt(chat_prompt(messages, options));
  if (!impl_->format) throw std::runtime_error("this tokenizer has no known chat format (ChatML, Llama-3 or harmony)");
  const auto chat = render_chat_spans(*impl_->format, messages, options);
  const auto prefix = impl_->tokenizer.encode("", /*add_special_tokens=*/true);
  auto ids = impl_->tokenizer.encode(chat.text, chat.template_spans, /*add_special_tokens=*/false);
  if (!starts_with(ids, prefix)) ids.insert(ids.begin(), prefix.begin(), prefix.end());
  return ids;
}

namespace {

// A text request as the generator takes it, its prompt already encoded.
GenerationRequest generation_request(const TextRequest& r, const std::vector<int32_t>& prompt_tokens,
                                     const GenerationDefaults& d, const std::vector<int64_t>& stops) {
  GenerationRequest g;
  g.prompt.assign(prompt_tokens.begin(), prompt_tokens.end());
  g.sampling.temperature = r.temperature.value_or(d.temperature.value_or(1.0));
  if (d.do_sample && !*d.do_sample && !r.temperature) g.sampling.temperature = 0;
  g.sampling.top_p = r.top_p.value_or(d.top_p.value_or(1.0));
  g.sampling.top_k = r.top_k.value_or(d.top_k.value_or(0));
  g.sampling.seed = r.seed;
  g.max_new_tokens = r.max_new_tokens;
  g.stop_strings = r.stop_strings;
  if (r.stop_at_eos) g.stop_token_ids = stops;
  return g;
}

void fill_completion(TextCompletion& out, Completion done) {
  out.text = std::move(done.text);
  out.tokens.assign(done.tokens.begin(), done.tokens.end());
  out.sampling_logprobs = std::move(done.sampling_logprobs);
  out.model_logprobs = std::move(done.model_logprobs);
  out.finish_reason = finish_reason_name(done.finish);
}

// The text layer of a feed: encodes what arrives, and turns completions back into text with their prompt's tokens.
class EncodingFeed : public RequestFeed {
 public:
  EncodingFeed(const LanguageModel& lm, TextFeed& text, const GenerationDefaults& defaults)
      : lm_(lm), text_(text), defaults_(defaults), stops_(lm.stop_token_ids()) {}

  GenerationRequest add(const TextRequest& r) {
    if (!r.prompt_tokens.empty()) {
      prompts_.push_back(r.prompt_tokens);
      return generation_request(r, r.prompt_tokens, defaults_, stops_);
    }
    // A group repeats its prompt: encode it once. The encoding is kept apart from prompts_, whose entries are handed
    // over as their requests finish, possibly before the next request with the same prompt arrives.
    if (prompts_.empty() || r.prompt != last_prompt_) {
      last_tokens_ = lm_.encode_prompt(r.prompt);
      last_prompt_ = r.prompt;
    }
    prompts_.push_back(last_tokens_);
    return generation_request(r, last_tokens_, defaults_, stops_);
  }
  std::vector<GenerationRequest> more() override {
    std::vector<GenerationRequest> out;
    for (const auto& r : text_.more()) out.push_back(add(r));
    return out;
  }
  void finished(std::size_t id, Completion done) override {
    TextCompletion c;
    c.prompt_tokens = std::move(prompts_[id]);
    fill_completion(c, std::move(done));
    text_.finished(id, std::move(c));
  }
  bool may_add() const override { return text_.may_add(); }
  bool cancelled(std::size_t id) const override { return text_.cancelled(id); }

 private:
  const LanguageModel& lm_;
  TextFeed& text_;
  const GenerationDefaults& defaults_;
  std::vector<int64_t> stops_;
  std::vector<std::vector<int32_t>> prompts_;  // by id
  std::string last_prompt_;
  std::vector<int32_t> last_tokens_;  // last_prompt_, encoded
};

// generate()'s own text feed: nothing arrives later, and completions are kept by id.
class CollectText : public TextFeed {
 public:
  explicit CollectText(std::size_t n) : out(n) {}
  std::vector<TextRequest> more() override { return {}; }
  void finished(std::size_t id, TextCompletion completion) override { out[id] = std::move(completion); }
  bool may_add() const override { return false; }
  std::vector<TextCompletion> out;
};

}  // namespace

std::vector<TextCompletion> LanguageModel::generate(const std::vector<TextRequest>& requests) {
  CollectText collect(requests.size());
  generate(requests, collect);
  return std::move(collect.out);
}

void LanguageModel::generate(const std::vector<TextRequest>& requests, TextFeed& feed) {
  EncodingFeed encoding(*this, feed, impl_->defaults);
  std::vector<GenerationRequest> work;
  for (const auto& r : requests) work.push_back(encoding.add(r));
  impl_->generator->generate(std::move(work), encoding);
}

void LanguageModel::check(const TextRequest& request) const {
  const auto tokens = request.prompt_tokens.empty() ? encode_prompt(request.prompt) : request.prompt_tokens;
  check_request(generation_request(request, tokens, impl_->defaults, stop_token_ids()),
                impl_->model.config(), 0);
}

std::vector<std::vector<float>> LanguageModel::score(const std::vector<std::vector<int32_t>>& sequences) const {
  std::vector<std::vector<int64_t>> wide;
  for (const auto& s : sequences) wide.emplace_back(s.begin(), s.end());
  return impl_->generator->score(wide);
}

void LanguageModel::load_adapter(const std::filesystem::path& dir) {
  const auto& o = impl_->model.options();
  impl_->adapter = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(dir, impl_->model.config(), o.device, o.dtype));
  impl_->model.use_adapter(impl_->adapter.get());
}

LoraAdapter& LanguageModel::new_adapter(const LoraConfig& config, uint64_t seed) {
  const auto& o = impl_->model.options();
  // Adapters train in float32 even when the model runs in bfloat16.
  impl_->adapter = std::make_unique<LoraAdapter>(
      LoraAdapter::create(impl_->model.config(), config, o.device, o.device.is_cuda() ? at::kFloat : o.dtype, seed));
  impl_->model.use_adapter(impl_->adapter.get());
  return *impl_->adapter;
}

LoraAdapter* LanguageModel::adapter() { return impl_->adapter.get(); }
const Transformer& LanguageModel::transformer() const { return impl_->model; }

const ModelConfig& LanguageModel::config() const { return impl_->model.config(); }
const GenerationDefaults& LanguageModel::generation_defaults() const { return impl_->defaults; }
const Tokenizer& LanguageModel::tokenizer() const { return impl_->tokenizer; }
std::optional<ChatFormat> LanguageModel::chat_format() const { return impl_->format; }

}  // namespace crucible::lm

#include "lm/policy/lm_policy.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <map>
#include <stdexcept>

#include "config/text_file.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/utf8_text.h"
#include "lm/kernels/device_memory.h"
#include "lm/model/language_model.h"
#include "lm/model/lora.h"
#include "lm/training/lora_trainer.h"
#include "lm/tokenizer/chat_reply.h"
#include "policy/task_prompt.h"

namespace crucible::policy {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

uint64_t mix(uint64_t h, uint64_t v) { return lm::splitmix64(h ^ lm::splitmix64(v)); }

uint64_t hash_text(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string directory_name(const std::string& task) {
  std::string out = task;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  return out;
}

lm::TrainerOptions trainer_options(const experiment::LmPolicyConfig& m) {
  lm::TrainerOptions o;
  o.learning_rate = m.learning_rate;
  o.weight_decay = m.weight_decay;
  o.max_grad_norm = m.max_grad_norm;
  o.micro_batch = m.micro_batch;
  o.activation_checkpointing = m.activation_checkpointing;
  switch (m.loss) {  // every loss the experiment parses has its trainer form: no default to fall back on
    case experiment::Loss::grpo_clip: o.loss.kind = lm::LossKind::grpo_clip; break;
    case experiment::Loss::importance_sampling: o.loss.kind = lm::LossKind::importance_sampling; break;
    case experiment::Loss::sdpo:
      o.loss.kind = lm::LossKind::grpo_clip;
      o.loss.distill_weight = m.sdpo_weight;
      break;
  }
  switch (m.normalization) {
    case experiment::Normalization::sequence_mean: o.loss.normalization = lm::TokenNormalization::sequence_mean; break;
    case experiment::Normalization::token_sum: o.loss.normalization = lm::TokenNormalization::token_sum; break;
    case experiment::Normalization::token_mean: o.loss.normalization = lm::TokenNormalization::token_mean; break;
  }
  o.loss.clip_low = m.clip_low;
  o.loss.clip_high = m.clip_high;
  o.loss.kl_coef = m.kl_coef;
  o.loss.measure_kl = m.measure_kl;
  if (m.max_logprob_mismatch > 0) o.loss.max_logprob_mismatch = m.max_logprob_mismatch;
  return o;
}

std::string read_contract_header() {
  return config::read_text_file(eval::default_include_dir() / "crucible" / "kernel.h");
}

std::string parse_failure(const lm::TextCompletion& c, int max_new_tokens) {
  if (c.finish_reason == "length")
    return "the reply was cut off at max_new_tokens = " + std::to_string(max_new_tokens) +
           " before a complete code block";
  return "the reply has no complete fenced code block";
}

lm::TextRequest text_request(std::string prompt, const experiment::PolicyConfig& config, uint64_t seed) {
  lm::TextRequest r;
  r.prompt = std::move(prompt);
  r.temperature = config.temperature;
  r.top_p = config.lm.top_p;
  r.top_k = config.lm.top_k;
  r.max_new_tokens = config.lm.max_new_tokens;
  r.seed = seed;
  return r;
}

// Where the code is looked for: the reply's answer in its chat format (harmony's final channel, the text after Qwen3's
// thinking), or the whole text for a base model.
lm::ReplyAnswer answer_of(const lm::TextCompletion& c, const lm::LanguageModel& model) {
  if (!model.chat_format()) return {c.text, ""};
  const std::vector<lm::TokenId> tokens(c.tokens.begin(), c.tokens.end());
  return lm::reply_answer(*model.chat_format(), tokens, c.text, model.tokenizer());
}

// A reply as a sample: its code (or why there is none), tokens and the model's log-probabilities.
Sample sample_of(lm::TextCompletion& c, const lm::LanguageModel& model, const std::string& task, uint64_t version,
                 int max_new_tokens, const TaskPrompter& prompter) {
  Sample smp;
  smp.task = task;
  smp.policy_version = version;
  const lm::ReplyAnswer answer = answer_of(c, model);
  if (!answer.text)
    smp.parse_error = answer.error + (c.finish_reason == "length" ? " (cut off at max_new_tokens = " +
                                                                        std::to_string(max_new_tokens) + ")" : "");
  else if (auto code = prompter.code(*answer.text)) smp.source = std::move(*code);
  else smp.parse_error = parse_failure(c, max_new_tokens);
  smp.output = std::move(c.text);
  smp.tokens = std::move(c.tokens);
  smp.logprobs = std::move(c.model_logprobs);
  return smp;
}

}  // namespace

std::optional<std::pair<std::string, std::string>> lm_policy_problem(const experiment::LmPolicyConfig& m,
                                                                      int cuda_devices) {
  for (const char* file : {"config.json", "tokenizer.json"})
    if (!fs::exists(fs::path(m.model) / file))
      return std::pair<std::string, std::string>{"model", "not a model directory (no " + std::string(file) + "): " + m.model};
  if (!m.adapter.empty() && !fs::exists(fs::path(m.adapter) / "adapter_config.json"))
    return std::pair<std::string, std::string>{"adapter", "not a PEFT adapter directory (no adapter_config.json): " + m.adapter};
  try {
    lm::lora_targets_named(m.lora_targets);
  } catch (const std::invalid_argument& e) {
    return std::pair<std::string, std::string>{"lora.targets", e.what()};
  }
  if (m.device.is_cuda() && m.device.index >= cuda_devices)
    return std::pair<std::string, std::string>{"device", "device " + m.device.name() + " is not usable here (" +
                                                             std::to_string(cuda_devices) + " GPUs)"};
  return std::nullopt;
}

// One adapter and, on the optimizer's copy, its trainer (AdamW state). `checkpoint` names the checkpoint its values
// came from, relative to the state directory ("" for the start adapter).
struct AdapterSlot {
  std::unique_ptr<lm::LoraAdapter> adapter;
  std::unique_ptr<lm::LoraTrainer> trainer;
  std::string checkpoint;
  bool optimizer_pending = false;  // restored without a trainer: its AdamW state loads when the trainer is made
};

struct LmPolicy::Impl {
  Impl(LmPolicySetup s, lm::LanguageModel m) : setup(std::move(s)), model(std::move(m)) {}

  LmPolicySetup setup;
  lm::LanguageModel model;
  std::unique_ptr<lm::LoraAdapter> start;
  std::map<std::string, AdapterSlot> slots;
  std::map<std::string, std::string> prompts;                 // task -> rendered prompt
  std::map<std::string, std::vector<int32_t>> prompt_tokens;  // task -> its tokens
  std::optional<TaskPrompter> prompter;  // Crucible's prompt or KernelBench's ([policy] prompt)
  // Seeds come from (seed, version, task, draw): draws count per task within a version, so a resumed run samples
  // what the uninterrupted one would have.
  uint64_t draws_version = 0;
  std::map<std::string, uint64_t> draws;

  std::string key_of(const std::string& task) const { return setup.per_task_adapters ? task : ""; }

  // A user turn as the model sees it; a base model without a chat format continues the text.
  std::string render(const std::string& user) const {
    if (!model.chat_format()) return user + "\n";
    lm::ChatOptions options;
    if (!setup.config.lm.system_prompt.empty()) options.system_prompt = setup.config.lm.system_prompt;
    options.reasoning_effort = setup.config.lm.reasoning_effort;
    return model.chat_prompt({{"user", user}}, options);
  }

  // A rendered prompt with more text at the end of its user turn (a self-distillation teacher's context).
  std::string with_context(const std::string& prompt, const std::string& context) const {
    const std::string marked = render("\x01");
    const std::string after_user = marked.substr(marked.find('\x01') + 1);
    if (prompt.size() < after_user.size() || prompt.compare(prompt.size() - after_user.size(), after_user.size(), after_user) != 0)
      return prompt + "\n\n" + context + "\n";
    return prompt.substr(0, prompt.size() - after_user.size()) + "\n\n" + context + after_user;
  }
  fs::path checkpoint_path(const std::string& rel) const { return setup.state_dir / rel; }

  AdapterSlot& slot(const std::string& key) {
    auto it = slots.find(key);
    if (it != slots.end()) return it->second;
    AdapterSlot s;
    s.adapter = std::make_unique<lm::LoraAdapter>(start->clone());
    return slots.emplace(key, std::move(s)).first->second;
  }

  lm::LoraTrainer& trainer(AdapterSlot& s) {
    if (!s.trainer) {
      s.trainer = std::make_unique<lm::LoraTrainer>(model.transformer(), *s.adapter, trainer_options(setup.config.lm));
      if (s.optimizer_pending) s.trainer->load_checkpoint(checkpoint_path(s.checkpoint));
      s.optimizer_pending = false;
    }
    return *s.trainer;
  }

  void load_into(AdapterSlot& s, const std::string& rel) {
    if (s.trainer) {
      s.trainer->load_checkpoint(checkpoint_path(rel));
    } else {
      const auto& o = model.transformer().options();
      s.adapter->copy_from(lm::LoraAdapter::load_peft(checkpoint_path(rel) / "adapter", model.config(), o.device, at::kFloat));
      s.optimizer_pending = true;
    }
    s.checkpoint = rel;
  }
};

namespace {

lm::LanguageModel load_model(const LmPolicySetup& setup) {
  lm::LanguageModelOptions mo;
  mo.device = setup.config.lm.device.name();
  mo.dtype = setup.config.lm.dtype;
  mo.cuda_graphs = setup.config.lm.cuda_graphs;
  mo.max_batch = setup.config.lm.max_batch;
  mo.chat_format = setup.config.lm.chat_format;
  mo.random_weights = setup.random_weights;
  return lm::LanguageModel::load(setup.config.lm.model, mo);
}

}  // namespace

void release_cached_device_memory(const eval::Device& device) {
  if (device.is_cuda()) lm::release_cached_memory(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.index)));
}

LmPolicy::LmPolicy(LmPolicySetup setup) : LmPolicy(std::move(setup), nullptr) {}

LmPolicy::LmPolicy(LmPolicySetup setup, const LmPolicy& weights_of) : LmPolicy(std::move(setup), &weights_of) {}

LmPolicy::LmPolicy(LmPolicySetup setup, const LmPolicy* weights_of) {
  if (weights_of) {
    // The shared model keeps the first policy's loading and generation settings: every one must be the same.
    const auto& theirs = weights_of->impl_->setup.config.lm;
    const auto& mine = setup.config.lm;
    if (theirs.model != mine.model || theirs.device != mine.device || theirs.dtype != mine.dtype ||
        theirs.chat_format != mine.chat_format || theirs.max_batch != mine.max_batch ||
        theirs.cuda_graphs != mine.cuda_graphs || weights_of->impl_->setup.random_weights != setup.random_weights)
      throw std::invalid_argument(
          "a policy shares weights only with a policy of the same model, device, dtype, chat format and batching");
  }
  if (setup.state_dir.empty()) throw std::invalid_argument("a libtorch policy needs a state directory for its checkpoints");
  auto model = weights_of ? weights_of->impl_->model.sharing_weights() : load_model(setup);
  impl_ = std::make_unique<Impl>(std::move(setup), std::move(model));
  auto& im = *impl_;
  const auto& m = im.setup.config.lm;
  const auto& o = im.model.transformer().options();
  // Adapters and their optimizer state stay in float32, also on a bfloat16 model.
  if (!m.adapter.empty()) {
    im.start = std::make_unique<lm::LoraAdapter>(lm::LoraAdapter::load_peft(m.adapter, im.model.config(), o.device, at::kFloat));
  } else {
    lm::LoraConfig lora;
    lora.rank = m.lora_rank;
    lora.alpha = m.lora_alpha;
    lora.dropout = m.lora_dropout;
    lora.use_rslora = m.lora_rslora;
    lora.targets = lm::lora_targets_named(m.lora_targets);
    im.start = std::make_unique<lm::LoraAdapter>(lm::LoraAdapter::create(im.model.config(), lora, o.device, at::kFloat, im.setup.seed));
  }
  im.prompter.emplace(im.setup.config.prompt, im.setup.language, read_contract_header());
}

LmPolicy::~LmPolicy() = default;

std::string LmPolicy::prompt_for(const eval::TaskSpec& task) {
  auto& im = *impl_;
  auto it = im.prompts.find(task.name);
  if (it != im.prompts.end()) return it->second;
  const std::string prompt = im.render(im.prompter->prompt(task));
  im.prompt_tokens[task.name] = im.model.encode_prompt(prompt);
  return im.prompts[task.name] = prompt;
}

std::string LmPolicy::refinement_prompt(const eval::TaskSpec& task, const Attempt& attempt) {
  auto& im = *impl_;
  return im.render(im.prompter->refinement(task, attempt));
}

std::vector<Sample> LmPolicy::refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) {
  auto& im = *impl_;
  const auto& m = im.setup.config.lm;
  prepare(task);
  if (im.draws_version != version_) im.draws.clear(), im.draws_version = version_;
  auto& s = im.slot(im.key_of(task.name));
  s.adapter->set_training(false);
  std::vector<lm::TextRequest> requests;
  auto& draw = im.draws[task.name];
  for (const auto& attempt : attempts)
    requests.push_back(text_request(refinement_prompt(task, attempt), im.setup.config,
                                    mix(mix(mix(im.setup.seed, version_), hash_text(task.name)), draw++)));
  im.model.transformer().use_adapter(s.adapter.get());
  auto completions = im.model.generate(requests);
  std::vector<Sample> out;
  for (std::size_t k = 0; k < completions.size(); ++k) {
    out.push_back(sample_of(completions[k], im.model, task.name, version_, m.max_new_tokens, *im.prompter));
    out.back().prompt = requests[k].prompt;
  }
  return out;
}

std::string LmPolicy::teacher_prompt(const Sample& sample) {
  auto& im = *impl_;
  auto own = im.prompts.find(sample.task);
  if (sample.prompt.empty() && own == im.prompts.end())
    throw std::invalid_argument("task '" + sample.task + "' was never prepared for this policy");
  return im.with_context(sample.prompt.empty() ? own->second : sample.prompt, sample.teacher_context);
}

void LmPolicy::prepare(const eval::TaskSpec& task) {
  prompt_for(task);
  impl_->slot(impl_->key_of(task.name));
}

std::vector<std::vector<float>> LmPolicy::completion_logprobs(const std::vector<Sample>& samples) {
  auto& im = *impl_;
  std::vector<std::vector<float>> out(samples.size());
  std::map<std::string, std::vector<std::size_t>> by_adapter;
  for (std::size_t i = 0; i < samples.size(); ++i) by_adapter[im.key_of(samples[i].task)].push_back(i);
  for (const auto& [key, members] : by_adapter) {
    auto& s = im.slot(key);
    s.adapter->set_training(false);
    im.model.transformer().use_adapter(s.adapter.get());
    std::vector<std::vector<int32_t>> sequences;
    for (std::size_t i : members) {
      auto prompt = im.prompt_tokens.find(samples[i].task);
      if (prompt == im.prompt_tokens.end())
        throw std::invalid_argument("task '" + samples[i].task + "' was never prepared for this policy");
      sequences.push_back(samples[i].prompt.empty() ? prompt->second : im.model.encode_prompt(samples[i].prompt));
      sequences.back().insert(sequences.back().end(), samples[i].tokens.begin(), samples[i].tokens.end());
    }
    auto scored = im.model.score(sequences);  // one value per token after the first
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto n = static_cast<std::ptrdiff_t>(samples[members[k]].tokens.size());
      out[members[k]].assign(scored[k].end() - n, scored[k].end());
    }
  }
  return out;
}

std::vector<Sample> LmPolicy::sample(const eval::TaskSpec& task, int n) { return sample_groups({{&task, n}}).front(); }

std::vector<std::vector<Sample>> LmPolicy::sample_groups(const std::vector<GroupAsk>& asks) {
  auto& im = *impl_;
  const auto& m = im.setup.config.lm;
  if (im.draws_version != version_) im.draws.clear(), im.draws_version = version_;
  std::vector<std::vector<Sample>> out(asks.size());
  // One generate call per adapter: every group when they share one, per task under ttt.
  std::map<std::string, std::vector<std::size_t>> by_adapter;
  for (std::size_t i = 0; i < asks.size(); ++i) by_adapter[im.key_of(asks[i].task->name)].push_back(i);
  for (const auto& [key, members] : by_adapter) {
    auto& s = im.slot(key);
    s.adapter->set_training(false);
    std::vector<lm::TextRequest> requests;
    std::vector<std::size_t> owner;
    for (std::size_t i : members) {
      const auto& task = *asks[i].task;
      const std::string prompt = prompt_for(task);
      auto& draw = im.draws[task.name];
      for (int k = 0; k < asks[i].n; ++k) {
        requests.push_back(text_request(prompt, im.setup.config,
                                        mix(mix(mix(im.setup.seed, version_), hash_text(task.name)), draw++)));
        owner.push_back(i);
      }
    }
    im.model.transformer().use_adapter(s.adapter.get());
    auto completions = im.model.generate(requests);
    for (std::size_t k = 0; k < completions.size(); ++k)
      out[owner[k]].push_back(sample_of(completions[k], im.model, asks[owner[k]].task->name, version_,
                                           m.max_new_tokens, *im.prompter));
  }
  return out;
}

void LmPolicy::update(const std::vector<Sample>& samples, const std::vector<double>& advantages) {
  auto& im = *impl_;
  if (samples.size() != advantages.size()) throw std::invalid_argument("one advantage per sample");
  std::map<std::string, lm::SequenceBatch> batches;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& smp = samples[i];
    if (smp.tokens.empty()) continue;
    auto prompt = im.prompt_tokens.find(smp.task);
    if (prompt == im.prompt_tokens.end())
      throw std::invalid_argument("update on task '" + smp.task + "', which this policy was never prepared for");
    auto& b = batches[im.key_of(smp.task)];
    const std::vector<int32_t> context = smp.prompt.empty() ? prompt->second : im.model.encode_prompt(smp.prompt);
    std::vector<int64_t> sequence(context.begin(), context.end());
    sequence.insert(sequence.end(), smp.tokens.begin(), smp.tokens.end());
    b.sequences.push_back(std::move(sequence));
    b.prompt_lengths.push_back(static_cast<int64_t>(context.size()));
    b.old_logprobs.push_back(smp.logprobs.size() == smp.tokens.size() ? smp.logprobs : std::vector<float>{});
    b.advantages.push_back(static_cast<float>(advantages[i]));
    b.teacher_prompts.emplace_back();
    if (im.setup.config.lm.loss == experiment::Loss::sdpo && !smp.teacher_context.empty()) {
      const auto teacher = im.model.encode_prompt(teacher_prompt(smp));
      b.teacher_prompts.back().assign(teacher.begin(), teacher.end());
    }
  }
  last_update_.clear();
  std::vector<std::string> stepped;
  for (auto& [key, batch] : batches) {
    auto& s = im.slot(key);
    auto& trainer = im.trainer(s);
    s.adapter->set_training(true);
    lm::TrainMetrics t;
    try {
      t = trainer.policy_step(batch);
    } catch (...) {
      s.adapter->set_training(false);
      throw;
    }
    s.adapter->set_training(false);
    last_update_.push_back({key, t.loss, t.kl, t.entropy, t.clip_fraction, t.grad_norm,
                            static_cast<int64_t>(batch.sequences.size()), t.tokens, t.dropped_sequences, t.distill_kl,
                            t.taught_sequences});
    stepped.push_back(key);
  }
  ++version_;
  for (const auto& key : stepped) {
    const std::string rel = "v" + std::to_string(version_) + (im.setup.per_task_adapters ? "/tasks/" + directory_name(key) : "");
    const fs::path dir = im.checkpoint_path(rel);
    fs::remove_all(dir);  // a version written by a run that stopped before committing it
    fs::create_directories(dir);
    auto& s = im.slots.at(key);
    s.trainer->save_checkpoint(dir);
    s.checkpoint = rel;
  }
}

std::string LmPolicy::snapshot() const {
  json adapters = json::object();
  for (const auto& [key, s] : impl_->slots)
    if (!s.checkpoint.empty()) adapters[key] = s.checkpoint;
  return json{{"kind", "libtorch"}, {"version", version_}, {"adapters", adapters}}.dump();
}

void LmPolicy::restore(const std::string& snapshot) {
  auto& im = *impl_;
  json j = json::parse(snapshot, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "libtorch" || !j.contains("version") ||
      !j["version"].is_number_unsigned() || !j.contains("adapters") || !j["adapters"].is_object())
    throw std::invalid_argument("not a libtorch policy snapshot: " + snapshot.substr(0, 200));
  for (const auto& [key, rel] : j["adapters"].items())
    if (!rel.is_string()) throw std::invalid_argument("libtorch policy snapshot: adapter '" + key + "' is not a path");
  for (const auto& [key, rel] : j["adapters"].items()) {
    auto& s = im.slot(key);
    if (s.checkpoint != rel.get<std::string>()) im.load_into(s, rel.get<std::string>());
  }
  // Adapters the snapshot does not name have not been trained in it: back to the start.
  for (auto& [key, s] : im.slots)
    if (!s.checkpoint.empty() && !j["adapters"].contains(key)) {
      s.adapter->copy_from(*im.start);
      s.checkpoint.clear();
      s.trainer.reset();
      s.optimizer_pending = false;
    }
  version_ = j["version"].get<uint64_t>();
}

}  // namespace crucible::policy

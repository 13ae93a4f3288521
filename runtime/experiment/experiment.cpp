#include "experiment/experiment.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <tuple>

#include "config/text_file.h"
#include "config/toml_edit.h"
#include "config/toml_reader.h"
#include "coordinator/candidate_ids.h"  // header only: the bounds that keep candidate ids apart
#include "tasks/task_loader.h"

namespace crucible::experiment {
namespace {

using config::TableReader;

// Every count in an experiment has a documented upper bound (docs/experiments.md), checked here as it is read:
// samples, steps and tokens bound the work a run asks for; workers and concurrent requests are threads.
constexpr int kMaxSamples = coordinator::kMaxGroupSamples;  // per group: its candidates share one block of ids
constexpr int kMaxSteps = 1'000'000;
constexpr uint32_t kMaxTurns = 16;
static_assert(kMaxTurns <= coordinator::kMaxTurns, "refinement turns must keep candidate ids apart");
constexpr int kMaxTokens = 131'072;
constexpr int kMaxThreads = 256;
// The file's own bound, the same on every machine (a run directory stays readable anywhere); a run also keeps to
// kCompileWorkersPerCore on the machine it starts on (check_machine_limits).
constexpr int kMaxCompileWorkers = 1024;
constexpr std::size_t kMaxSeeds = 1000;
constexpr std::size_t kMaxNameBytes = 100;

double number_in(TableReader& t, const std::string& key, double fallback, double lo, double hi) {
  double v = t.get_number(key, fallback);
  if (!(v >= lo && v <= hi)) {
    std::ostringstream s;
    s << "must be in [" << lo << ", " << hi << "], got " << v;
    t.fail(key, s.str());
  }
  return v;
}

template <class Parse>
auto parse_choice(TableReader& t, const std::string& key, const std::string& fallback, Parse parse) {
  std::string name = t.get_string(key, fallback);
  try {
    return parse(name);
  } catch (const std::invalid_argument& e) {
    t.fail(key, e.what());
  }
}

RunMode parse_run_mode(const std::string& name) {
  if (name == "grpo") return RunMode::grpo;
  if (name == "best_of_n") return RunMode::best_of_n;
  if (name == "ttt") return RunMode::ttt;
  throw std::invalid_argument("unknown mode '" + name + "' (grpo, best_of_n, ttt)");
}

// The name becomes a directory, <run_root>/<name>-<time>: one plain path component, printable, of bounded length.
std::string run_name(TableReader& t) {
  const std::string name = t.require_string("name");
  if (name.empty() || name.size() > kMaxNameBytes)
    t.fail("name", "must be 1 to " + std::to_string(kMaxNameBytes) + " bytes long");
  if (name == "." || name == "..") t.fail("name", "must not be '.' or '..'");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\')
      t.fail("name", "a run directory's name: no '/', '\\' or control characters");
  return name;
}

std::vector<uint64_t> read_seeds(TableReader& t) {
  // Integers only: a float such as 1e300 or inf has no exact seed. TOML integers end at 2^63 - 1.
  const auto values = t.get_int_array_in("seeds", 0, std::numeric_limits<int64_t>::max(), kMaxSeeds);
  std::vector<uint64_t> seeds;
  for (const int64_t s : values) {
    if (std::find(seeds.begin(), seeds.end(), static_cast<uint64_t>(s)) != seeds.end())
      t.fail("seeds", "seed " + std::to_string(s) + " is listed twice");
    seeds.push_back(static_cast<uint64_t>(s));
  }
  return seeds;
}

void read_experiment_table(TableReader t, Experiment& e) {
  e.name = run_name(t);
  e.mode = parse_choice(t, "mode", "grpo", parse_run_mode);
  if (t.has("seeds")) {
    e.seeds = read_seeds(t);
    if (e.seeds.empty()) t.fail("seeds", "give at least one seed");
  } else {
    t.get_int_array_in("seeds", 0, 0, 0);
  }
  e.run_root = t.get_string("run_root", e.run_root);
  if (e.run_root.empty()) t.fail("run_root", "name a directory");
  t.finish();
}

std::vector<int> ints_in(TableReader& t, const std::string& key, int lo, int hi) {
  std::vector<int> out;
  for (const int64_t v : t.get_int_array_in(key, lo, hi, 10'000)) out.push_back(static_cast<int>(v));
  return out;
}

void read_tasks(TableReader t, TaskSelection& s) {
  s.names = t.get_string_array("names");
  s.levels = ints_in(t, "levels", 0, 100);
  s.problems = ints_in(t, "problems", 0, 1'000'000);
  s.split = t.get_string("split", "");
  if (!s.split.empty() && s.split != "train" && s.split != "eval") t.fail("split", "must be \"train\" or \"eval\"");
  s.eval_fraction = number_in(t, "eval_fraction", s.eval_fraction, 0.0, 1.0);
  s.split_seed = static_cast<uint64_t>(t.get_int_in("split_seed", 0, 0, std::numeric_limits<int64_t>::max()));
  s.dir = t.get_string("dir", "");
  if (s.names.empty() && s.split.empty() && s.levels.empty() && s.problems.empty())
    t.fail("names", "name the tasks, or select them by levels, problems or a split");
  t.finish();
}

// Only the canonical names ("cuda:1", not "cuda" or "cuda:01"), so every spelling of a device is one device.
eval::Device parse_canonical_device(const std::string& text) {
  const eval::Device d = eval::parse_device(text);
  if (d.name() != text) throw std::invalid_argument("unknown device '" + text + "' (cpu, cuda:N)");
  return d;
}

PolicyKind parse_policy_kind(const std::string& name) {
  for (auto k : {PolicyKind::search, PolicyKind::replay, PolicyKind::libtorch, PolicyKind::openai})
    if (policy_kind_name(k) == name) return k;
  throw std::invalid_argument("unknown policy kind '" + name + "' (search, replay, libtorch, openai)");
}

Loss parse_loss(const std::string& name) {
  for (auto l : {Loss::grpo_clip, Loss::importance_sampling, Loss::sdpo})
    if (loss_name(l) == name) return l;
  throw std::invalid_argument("unknown loss '" + name + "' (grpo_clip, importance_sampling, sdpo)");
}

Normalization parse_normalization(const std::string& name) {
  for (auto n : {Normalization::sequence_mean, Normalization::token_sum, Normalization::token_mean})
    if (normalization_name(n) == name) return n;
  throw std::invalid_argument("unknown normalization '" + name + "' (sequence_mean, token_sum, token_mean)");
}

std::string one_of(TableReader& t, const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& choices) {
  return parse_choice(t, key, fallback, [&](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    throw std::invalid_argument("unknown value '" + v + "' (" + list + ")");
  });
}

void read_lora(TableReader t, LmPolicyConfig& m) {
  m.lora_rank = t.get_int_in("rank", m.lora_rank, 1, 1024);
  m.lora_alpha = number_in(t, "alpha", m.lora_alpha, 1e-6, 1e6);
  m.lora_dropout = number_in(t, "dropout", m.lora_dropout, 0.0, 0.99);
  m.lora_rslora = t.get_bool("rslora", m.lora_rslora);
  if (t.has("targets")) {
    m.lora_targets = t.get_string_array("targets");
    if (m.lora_targets.empty()) t.fail("targets", "name at least one layer (q_proj ... down_proj)");
  }
  t.finish();
}

void read_train(TableReader t, LmPolicyConfig& m) {
  m.learning_rate = number_in(t, "learning_rate", m.learning_rate, 0.0, 1.0);
  m.weight_decay = number_in(t, "weight_decay", m.weight_decay, 0.0, 1.0);
  m.max_grad_norm = number_in(t, "max_grad_norm", m.max_grad_norm, 0.0, 1e6);
  m.micro_batch = t.get_int_in("micro_batch", m.micro_batch, 1, 4096);
  m.activation_checkpointing = t.get_bool("activation_checkpointing", m.activation_checkpointing);
  m.loss = parse_choice(t, "loss", loss_name(m.loss), parse_loss);
  m.normalization = parse_choice(t, "normalization", normalization_name(m.normalization), parse_normalization);
  m.clip_low = number_in(t, "clip_low", m.clip_low, 0.0, 1.0);
  m.clip_high = number_in(t, "clip_high", m.clip_high, 0.0, 10.0);
  m.kl_coef = number_in(t, "kl_coef", m.kl_coef, 0.0, 1e3);
  m.measure_kl = t.get_bool("measure_kl", m.measure_kl);
  m.max_logprob_mismatch = number_in(t, "max_logprob_mismatch", m.max_logprob_mismatch, 0.0, 1e3);
  if (m.loss == Loss::sdpo) {
    m.sdpo_feedback = parse_choice(t, "sdpo_feedback", std::string(policy::teacher_feedback_name(m.sdpo_feedback)),
                                   [](const std::string& v) {
                                     if (auto k = policy::parse_teacher_feedback(v)) return *k;
                                     throw std::invalid_argument("unknown value '" + v +
                                                                 "' (execution, successful_sibling)");
                                   });
    m.sdpo_weight = number_in(t, "sdpo_weight", m.sdpo_weight, 1e-6, 1.0);
  } else {
    for (const char* key : {"sdpo_feedback", "sdpo_weight"})
      if (t.has(key)) t.fail(key, "only with loss = \"sdpo\"");
  }
  t.finish();
}

void read_openai(TableReader& t, OpenAiConfig& o) {
  o.base_url = t.require_string("base_url");
  if (o.base_url.rfind("http://", 0) != 0 && o.base_url.rfind("https://", 0) != 0)
    t.fail("base_url", "must start with http:// or https://");
  o.model = t.require_string("model");
  o.api_key_env = t.get_string("api_key_env", "");
  o.api_key_file = t.get_string("api_key_file", "");
  if (!o.api_key_env.empty() && !o.api_key_file.empty()) t.fail("api_key_file", "give api_key_env or api_key_file, not both");
  o.concurrency = t.get_int_in("concurrency", o.concurrency, 1, kMaxThreads);
  o.timeout_s = number_in(t, "timeout_s", o.timeout_s, 0.1, 86400);
  o.retries = t.get_int_in("retries", o.retries, 0, 100);
  o.backoff_s = number_in(t, "backoff_s", o.backoff_s, 0.0, 600);
  o.max_tokens = t.get_int_in("max_tokens", o.max_tokens, 1, kMaxTokens);
  o.top_p = number_in(t, "top_p", o.top_p, 1e-6, 1.0);
  o.system_prompt = t.get_string("system_prompt", "");
  for (const char* key : {"device", "dtype", "adapter", "cuda_graphs", "max_new_tokens", "top_k", "chat_format",
                          "reasoning_effort", "lora", "train"})
    if (t.has(key)) t.fail(key, "only for kind = \"libtorch\"");
}

void read_judge(TableReader t, JudgeConfig& j) {
  j.enabled = true;
  j.endpoint.max_tokens = 256;
  read_openai(t, j.endpoint);
  j.weight = number_in(t, "weight", j.weight, 0.0, 1e6);
  j.when_correct_below = number_in(t, "when_correct_below", j.when_correct_below, 0.0, 2.0);
  j.temperature = number_in(t, "temperature", j.temperature, 0.0, 2.0);
  t.finish();
}

// chat_format = "auto" | "chatml" | "llama3" | "qwen3" | "harmony"; reasoning_effort = "low" | "medium" | "high".
// The effort is harmony's; it is refused where the format is set to another one (auto may turn out to be harmony).
void read_chat_format(TableReader& t, LmPolicyConfig& m) {
  m.chat_format = parse_choice(t, "chat_format", "auto", [](const std::string& v) -> std::optional<lm::ChatFormat> {
    if (v == "auto") return std::nullopt;
    if (auto format = lm::parse_chat_format(v)) return format;
    throw std::invalid_argument("unknown value '" + v + "' (auto, chatml, llama3, qwen3, harmony)");
  });
  m.reasoning_effort = parse_choice(t, "reasoning_effort", "medium", [](const std::string& v) {
    if (auto effort = lm::parse_reasoning_effort(v)) return *effort;
    throw std::invalid_argument("unknown value '" + v + "' (low, medium, high)");
  });
  if (t.has("reasoning_effort") && m.chat_format && *m.chat_format != lm::ChatFormat::harmony)
    t.fail("reasoning_effort", "only with chat_format = \"harmony\" (or \"auto\" on a gpt-oss model)");
}

constexpr const char* kPromptKeys[] = {"prompt", "kernelbench_dir", "kernelbench_backend", "kernelbench_option"};

// The language-model policies' prompt. Which one is the default depends on [eval] candidate, read later:
// resolve_prompt settles it once every table is read.
void read_prompt(TableReader& t, policy::PromptSettings& prompt) {
  prompt.kind = parse_choice(t, "prompt", "crucible", [](const std::string& v) { return policy::parse_prompt_kind(v); });
  auto& kb = prompt.kernelbench;
  kb.kernelbench_dir = t.get_string("kernelbench_dir", "");
  kb.backend = t.get_string("kernelbench_backend", kb.backend);  // prompts.toml's own tables: checked when it is read
  if (kb.backend.empty()) t.fail("kernelbench_backend", "name a backend of KernelBench's prompts (cuda, triton, ...)");
  kb.option = one_of(t, "kernelbench_option", kb.option, {"zero_shot", "one_shot", "few_shot"});
}

void read_policy(TableReader t, PolicyConfig& p) {
  p.kind = parse_choice(t, "kind", policy_kind_name(p.kind), parse_policy_kind);
  p.replay_dir = t.get_string("replay_dir", "");
  if (p.kind == PolicyKind::replay && p.replay_dir.empty()) t.fail("replay_dir", "the replay policy needs replay_dir");
  p.learning_rate = number_in(t, "learning_rate", p.learning_rate, 0.0, 1e3);
  p.temperature = number_in(t, "temperature", p.temperature, 1e-3, 1e3);
  p.checkpoint = t.get_string("checkpoint", "");
  if (p.kind == PolicyKind::openai) {
    // The OpenAI API (and vLLM, SGLang, crucible serve) accepts temperatures up to 2.
    if (p.temperature > 2.0) t.fail("temperature", "a served model accepts at most 2");
    read_openai(t, p.openai);
    read_prompt(t, p.prompt);
    if (!p.checkpoint.empty()) t.fail("checkpoint", "a served model starts as the server has it");
    t.finish();
    return;
  }
  for (const char* key : {"base_url", "api_key_env", "api_key_file", "concurrency", "timeout_s", "retries", "backoff_s",
                          "max_tokens"})
    if (t.has(key)) t.fail(key, "only for kind = \"openai\"");
  if (p.kind != PolicyKind::libtorch) {
    for (const char* key : kPromptKeys)
      if (t.has(key)) t.fail(key, "only for the language-model policies (kind = \"libtorch\" or \"openai\")");
    for (const char* key : {"model", "device", "dtype", "adapter", "cuda_graphs", "max_new_tokens", "top_p", "top_k",
                            "system_prompt", "chat_format", "reasoning_effort", "lora", "train"})
      if (t.has(key)) t.fail(key, "only for kind = \"libtorch\"");
    t.finish();
    return;
  }
  auto& m = p.lm;
  m.model = t.require_string("model");
  m.device = parse_choice(t, "device", m.device.name(), parse_canonical_device);
  m.dtype = one_of(t, "dtype", m.dtype, {"auto", "f32", "bf16", "f16"});
  m.adapter = t.get_string("adapter", "");
  m.cuda_graphs = t.get_bool("cuda_graphs", m.cuda_graphs);
  m.max_batch = t.get_int_in("max_batch", m.max_batch, 0, 4096);
  m.max_new_tokens = t.get_int_in("max_new_tokens", m.max_new_tokens, 1, kMaxTokens);
  m.top_p = number_in(t, "top_p", m.top_p, 1e-6, 1.0);
  m.top_k = t.get_int_in("top_k", m.top_k, 0, 1'000'000);
  m.system_prompt = t.get_string("system_prompt", "");
  read_chat_format(t, m);
  read_prompt(t, p.prompt);
  if (!p.checkpoint.empty()) t.fail("checkpoint", "a libtorch policy starts from `adapter` (a PEFT directory)");
  if (auto lora = t.get_table("lora")) read_lora(*lora, m);
  if (auto train = t.get_table("train")) read_train(*train, m);
  if (m.activation_checkpointing && m.lora_dropout > 0)
    t.fail("train", "activation_checkpointing recomputes each block, so [policy.lora] dropout must be 0");
  t.finish();
}

void read_reward(TableReader t, rewards::RewardSpec& r) {
  r.kind = parse_choice(t, "kind", "speedup", rewards::parse_reward_kind);
  r.alpha = number_in(t, "alpha", r.alpha, -1e6, 1e6);
  r.beta = number_in(t, "beta", r.beta, -1e6, 1e6);
  r.gamma = number_in(t, "gamma", r.gamma, -1e6, 1e6);
  r.r_max = number_in(t, "r_max", r.r_max, 0.0, 1e9);
  r.scale = number_in(t, "scale", r.scale, 0.0, 1e12);
  r.coverage_weight = number_in(t, "coverage_weight", r.coverage_weight, 0.0, 1e6);
  r.min_coverage = number_in(t, "min_coverage", r.min_coverage, 0.0, 1.0);
  t.finish();
}

void read_advantage(TableReader t, rewards::AdvantageSpec& a, bool& task_baseline) {
  a.kind = parse_choice(t, "kind", "grpo", rewards::parse_advantage_kind);
  a.epsilon = number_in(t, "epsilon", a.epsilon, 0.0, 1.0);
  a.beta = number_in(t, "beta", a.beta, 0.0, 1e6);
  a.kl_target = number_in(t, "kl_target", a.kl_target, 1e-6, 1e3);
  a.drop_constant_groups = t.get_bool("drop_constant_groups", a.drop_constant_groups);
  task_baseline = t.get_bool("task_baseline", task_baseline);
  t.finish();
}

SearchKind parse_search_kind(const std::string& name) {
  if (name == "none") return SearchKind::none;
  if (name == "puct") return SearchKind::puct;
  throw std::invalid_argument("unknown search kind '" + name + "' (none or puct)");
}

void read_search(TableReader t, SearchConfig& c) {
  c.kind = parse_choice(t, "kind", "none", parse_search_kind);
  c.c = number_in(t, "c", c.c, 0.0, 1e6);
  t.finish();
}

void read_multi_turn(TableReader t, rewards::MultiTurnSpec& m) {
  m.turns = t.get_int_in<uint32_t>("turns", m.turns, 1, kMaxTurns);
  m.returns = parse_choice(t, "returns", "per_turn", rewards::parse_turn_returns);
  m.gamma = number_in(t, "gamma", m.gamma, 0.0, 1.0);
  t.finish();
}

// -1 (the mode's default) or 1 to max.
int trials(TableReader& t, const std::string& key, int max) {
  const int n = t.get_int_in(key, -1, -1, max);
  if (n == 0) t.fail(key, "must be between 1 and " + std::to_string(max) + " (or -1: the mode's default)");
  return n;
}

void read_eval(TableReader t, EvalConfig& c) {
  if (t.has("devices")) {
    c.devices.clear();
    for (const auto& name : t.get_string_array("devices")) {
      try {
        c.devices.push_back(parse_canonical_device(name));
      } catch (const std::invalid_argument& e) {
        t.fail("devices", e.what());
      }
    }
    std::vector<eval::Device> sorted = c.devices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) t.fail("devices", "a device is listed twice");
    for (const auto& d : c.devices)
      if (d.backend != c.devices.front().backend)
        t.fail("devices", "mix of cpu and cuda devices: a candidate is written for one");
  } else {
    t.get_string_array("devices");
  }
  const std::string derived = c.devices.empty() ? "" : std::string(eval::backend_name(c.devices.front().backend));
  if (derived.empty() && !t.has("backend"))
    t.fail("backend", "with no local devices, say what candidates are written for (cpu, cuda)");
  c.backend = parse_choice(t, "backend", derived, [](const std::string& v) { return eval::parse_backend(v); });
  if (!derived.empty() && eval::backend_name(c.backend) != derived) t.fail("backend", "the devices are " + derived);
  c.kind = parse_choice(t, "candidate", "native", [](const std::string& v) { return eval::parse_candidate_kind(v); });
  if (c.kind == eval::CandidateKind::triton && c.backend != eval::Backend::cuda)
    t.fail("candidate", "Triton candidates run on GPU devices (backend cuda)");
  c.mode = parse_choice(t, "mode", std::string(eval::eval_depth_name(c.mode)),
                        [](const std::string& v) { return eval::parse_eval_depth(v); });
  c.launches = parse_choice(t, "launches", "eager", [](const std::string& v) { return eval::parse_launches(v); });
  if (c.launches == eval::Launches::queued && c.kind != eval::CandidateKind::triton)
    t.fail("launches", "queued launches hold Triton candidates' GPU calls (candidate = \"triton\", CUDA devices); "
                       "CUDA C++ candidates are timed as launched");
  c.forbid_torch_ops = parse_choice(t, "torch_ops", "allow",
                                    [](const std::string& v) { return eval::parse_forbid_torch_ops(v); });
  if (t.has("torch_ops") && c.kind != eval::CandidateKind::kernelbench)
    t.fail("torch_ops", "PyTorch operators inside ModelNew: only with candidate = \"kernelbench\"");
  c.sizes = t.get_string("sizes", "");
  c.compile_workers = t.get_int_in("compile_workers", 0, 0, kMaxCompileWorkers);
  c.correctness_trials = trials(t, "correctness_trials", 100);
  c.timing_trials = trials(t, "timing_trials", 1000);
  c.call_timeout_s = number_in(t, "call_timeout_s", c.call_timeout_s, 0.1, 3600.0);
  c.evaluation_budget_s = number_in(t, "evaluation_budget_s", c.evaluation_budget_s, 0.0, 86400.0);
  t.finish();
}

void read_monitor(TableReader t, MonitorConfig& m) {
  m.listen = t.require_string("listen");
  // Port 0: any free one (the run prints the address).
  const bool any_port = m.listen.size() > 2 && m.listen.compare(m.listen.size() - 2, 2, ":0") == 0;
  try {
    std::tie(m.host, m.port) = parse_host_port(any_port ? m.listen.substr(0, m.listen.size() - 2) + ":1" : m.listen);
    if (any_port) m.port = 0;
  } catch (const std::invalid_argument& e) {
    t.fail("listen", e.what());
  }
  m.token_env = t.get_string("token_env", m.token_env);
  if (m.token_env.empty()) t.fail("token_env", "name the environment variable that holds the token");
  t.finish();
}

void read_cluster(TableReader t, ClusterConfig& c) {
  c.listen = t.get_string("listen", "");
  if (!c.listen.empty()) {
    try {
      std::tie(c.host, c.port) = parse_host_port(c.listen);
    } catch (const std::invalid_argument& e) {
      t.fail("listen", e.what());
    }
  }
  c.secret_file = t.get_string("secret_file", "");
  if (!c.listen.empty() && c.secret_file.empty()) t.fail("secret_file", "nodes prove a shared secret: name its file");
  c.heartbeat_s = number_in(t, "heartbeat_s", c.heartbeat_s, 0.05, 60.0);
  c.node_timeout_s = number_in(t, "node_timeout_s", c.node_timeout_s, 0.1, 3600.0);
  if (c.node_timeout_s < 2 * c.heartbeat_s) t.fail("node_timeout_s", "must be at least two heartbeats");
  c.tls_certificate = t.get_string("tls_certificate", "");
  c.tls_key = t.get_string("tls_key", "");
  c.tls_ca = t.get_string("tls_ca", "");
  const int given = !c.tls_certificate.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
  if (given != 0 && given != 3) t.fail("tls_certificate", "TLS needs tls_certificate, tls_key and tls_ca together");
  t.finish();
}

void record_lines(const toml::table& table, const std::string& prefix, std::map<std::string, int64_t>& lines) {
  for (const auto& [k, v] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    lines[key] = static_cast<int64_t>(v.source().begin.line);
    if (const auto* sub = v.as_table()) record_lines(*sub, key, lines);
  }
}

}  // namespace

void Experiment::fail(const std::string& key, const std::string& message) const {
  auto it = key_lines.find(key);
  throw config::ConfigError(file, it == key_lines.end() ? 0 : it->second, key, message);
}

std::string policy_kind_name(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::search: return "search";
    case PolicyKind::replay: return "replay";
    case PolicyKind::libtorch: return "libtorch";
    case PolicyKind::openai: return "openai";
  }
  return "?";
}

std::string loss_name(Loss loss) {
  switch (loss) {
    case Loss::grpo_clip: return "grpo_clip";
    case Loss::importance_sampling: return "importance_sampling";
    case Loss::sdpo: return "sdpo";
  }
  return "?";
}

std::string normalization_name(Normalization n) {
  switch (n) {
    case Normalization::sequence_mean: return "sequence_mean";
    case Normalization::token_sum: return "token_sum";
    case Normalization::token_mean: return "token_mean";
  }
  return "?";
}

std::string run_mode_name(RunMode mode) {
  switch (mode) {
    case RunMode::grpo: return "grpo";
    case RunMode::best_of_n: return "best_of_n";
    case RunMode::ttt: return "ttt";
  }
  return "?";
}

namespace {

// A directory named relative to the experiment file, made absolute in `dir` and in the text under `key`.
void make_dir_absolute(Experiment& e, const std::string& key, std::string& dir, const std::filesystem::path& relative_to) {
  if (relative_to.empty() || dir.empty() || std::filesystem::path(dir).is_absolute()) return;
  std::error_code ec;
  const auto base = std::filesystem::absolute(relative_to, ec);
  if (ec) e.fail(key, "cannot resolve " + dir + " against " + relative_to.string());
  dir = (base / dir).lexically_normal().string();
  e.text = config::with_string_value(e.text, e.file, key, dir);
}

bool language_model_policy(const PolicyConfig& p) {
  return p.kind == PolicyKind::libtorch || p.kind == PolicyKind::openai;
}

// KernelBench-format candidates are asked for with KernelBench's prompt, every other kind with Crucible's: the
// default follows [eval] candidate, and a prompt that asks for another kind than the evaluator judges is refused.
void resolve_prompt(Experiment& e, const std::filesystem::path& relative_to) {
  if (!language_model_policy(e.policy)) return;
  auto& prompt = e.policy.prompt;
  const bool kernelbench_answers = e.eval.kind == eval::CandidateKind::kernelbench;
  if (!e.key_lines.count("policy.prompt"))
    prompt.kind = kernelbench_answers ? policy::PromptKind::kernelbench : policy::PromptKind::crucible;
  if (prompt.kind == policy::PromptKind::kernelbench && !kernelbench_answers)
    e.fail("policy.prompt", "KernelBench's prompt asks for a ModelNew file: set [eval] candidate = \"kernelbench\"");
  if (prompt.kind == policy::PromptKind::crucible && kernelbench_answers)
    e.fail("policy.prompt", "[eval] candidate = \"kernelbench\" is asked for with prompt = \"kernelbench\"");
  if (prompt.kind == policy::PromptKind::crucible) {
    for (const std::string key : {"policy.kernelbench_dir", "policy.kernelbench_backend", "policy.kernelbench_option"})
      if (e.key_lines.count(key)) e.fail(key, "only with prompt = \"kernelbench\"");
    return;
  }
  std::string dir = prompt.kernelbench.kernelbench_dir.string();
  if (dir.empty()) {
    const auto line = e.key_lines.count("policy") ? e.key_lines.at("policy") : 0;
    throw config::ConfigError(e.file, line, "policy.kernelbench_dir",
                              "KernelBench's prompt is read from a KernelBench checkout: name it (its root, which "
                              "holds KernelBench/ and src/kernelbench/prompts/prompts.toml)");
  }
  make_dir_absolute(e, "policy.kernelbench_dir", dir, relative_to);
  prompt.kernelbench.kernelbench_dir = dir;
}

}  // namespace

Experiment parse_experiment(const std::string& text, const std::string& file, const std::filesystem::path& relative_to) {
  toml::table root = config::parse_toml_text(text, file);
  TableReader top(root, file);
  Experiment e;
  e.text = text;
  e.file = file;
  record_lines(root, "", e.key_lines);
  read_experiment_table(top.require_table("experiment"), e);
  read_tasks(top.require_table("tasks"), e.tasks);
  if (auto t = top.get_table("policy")) read_policy(*t, e.policy);
  if (auto t = top.get_table("grpo")) {
    e.grpo.steps = t->get_int_in("steps", e.grpo.steps, 1, kMaxSteps);
    e.grpo.batch_size = t->get_int_in("batch_size", e.grpo.batch_size, 1, 10'000);
    e.grpo.group_size = t->get_int_in("group_size", e.grpo.group_size, 1, kMaxSamples);
    e.grpo.max_staleness = t->get_int_in("max_staleness", e.grpo.max_staleness, 0, 100);
    t->finish();
  }
  if (auto t = top.get_table("best_of_n")) {
    e.best_of_n.k = t->get_int_in("k", e.best_of_n.k, 1, kMaxSteps);
    e.best_of_n.group_size = t->get_int_in("group_size", e.best_of_n.group_size, 1, kMaxSamples);
    t->finish();
  }
  if (auto t = top.get_table("ttt")) {
    e.ttt.steps = t->get_int_in("steps", e.ttt.steps, 1, kMaxSteps);
    e.ttt.rollouts = t->get_int_in("rollouts", e.ttt.rollouts, 1, kMaxSamples);
    e.ttt.concurrent_tasks = t->get_int_in("concurrent_tasks", e.ttt.concurrent_tasks, 1, kMaxThreads);
    t->finish();
  }
  if (auto t = top.get_table("reward")) read_reward(*t, e.reward);
  if (auto t = top.get_table("advantage")) read_advantage(*t, e.advantage, e.task_baseline);
  if (auto t = top.get_table("multi_turn")) read_multi_turn(*t, e.multi_turn);
  if (auto t = top.get_table("search")) read_search(*t, e.search);
  if (auto t = top.get_table("judge")) read_judge(*t, e.judge);
  if (auto t = top.get_table("eval")) read_eval(*t, e.eval);
  if (auto t = top.get_table("cluster")) read_cluster(*t, e.cluster);
  if (auto t = top.get_table("monitor")) read_monitor(*t, e.monitor);
  top.finish();
  if (e.eval.devices.empty() && !e.cluster.enabled())
    e.fail("eval.devices", "give at least one device (or let nodes evaluate: [cluster] listen)");
  if (e.search.kind == SearchKind::puct && e.mode == RunMode::grpo)
    e.fail("search.kind", "puct reuses states within a task: use it with mode best_of_n or ttt");
  // Refinement turns number their candidates in smaller blocks per group (coordinator/candidate_ids.h).
  if (!coordinator::ids_fit(std::max({e.grpo.group_size, e.best_of_n.group_size, e.ttt.rollouts}), e.multi_turn.turns))
    e.fail("multi_turn.turns", "multi-turn groups must hold fewer than " + std::to_string(coordinator::kIdsPerTurn) +
                                   " samples");
  if (e.advantage.kind == rewards::AdvantageKind::trloo && e.multi_turn.turns == 1)
    e.fail("advantage.kind", "trloo compares trajectories turn by turn: set [multi_turn] turns > 1 (or use rloo)");
  make_dir_absolute(e, "tasks.dir", e.tasks.dir, relative_to);
  resolve_prompt(e, relative_to);
  // Checked once all tables are read, so the message can point at the key that matters.
  if (!e.tasks.dir.empty() && !std::filesystem::is_directory(e.tasks.dir))
    e.fail("tasks.dir", "not a directory: " + e.tasks.dir);
  return e;
}

void check_machine_limits(const Experiment& e, unsigned cores) {
  const int64_t most = int64_t{kCompileWorkersPerCore} * std::max(1u, cores);
  if (e.eval.compile_workers > most)
    e.fail("eval.compile_workers", "at most " + std::to_string(kCompileWorkersPerCore) + " per core: " +
                                       std::to_string(most) + " on this machine (" + std::to_string(cores) + " cores)");
}

void check_run_root(const Experiment& e) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // The first of run_root and its parents that exists must be a directory: the run directory is made below it.
  for (fs::path p = e.run_root; !p.empty(); p = p.parent_path()) {
    if (!fs::exists(p, ec)) {
      if (p == p.parent_path()) break;
      continue;
    }
    if (!fs::is_directory(p, ec)) e.fail("experiment.run_root", "not a directory: " + p.string());
    return;
  }
}

std::pair<std::string, uint16_t> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw std::invalid_argument("'" + text + "' is not HOST:PORT");
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    throw std::invalid_argument("'" + port + "' is not a port (1-65535)");
  return {host, static_cast<uint16_t>(std::stoi(port))};
}

Experiment load_experiment(const std::filesystem::path& path) {
  std::string text;
  try {
    text = config::read_text_file(path, config::kMaxTomlBytes);
  } catch (const std::invalid_argument& e) {
    throw config::ConfigError(path.string(), 0, "", std::string("cannot read the experiment: ") + e.what());
  }
  const auto directory = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  return parse_experiment(text, path.string(), directory);
}

std::vector<eval::TaskSpec> resolve_tasks(const Experiment& e) {
  const std::filesystem::path dir = e.tasks.dir.empty() ? tasks::default_tasks_dir() : std::filesystem::path(e.tasks.dir);
  std::vector<std::string> names = e.tasks.names;
  if (names.empty())
    for (const auto& f : tasks::task_files(dir)) names.push_back(f.stem().string());
  std::vector<eval::TaskSpec> specs;
  for (const auto& n : names) {
    try {
      specs.push_back(tasks::find_task(n, dir));
    } catch (const std::invalid_argument& err) {
      e.fail("tasks.names", err.what());
    }
  }
  // By level, then by KernelBench problem id (imported tasks carry it in their [kernelbench] table).
  const auto& levels = e.tasks.levels;
  const auto& problems = e.tasks.problems;
  const auto dropped = [&](const eval::TaskSpec& t) {
    if (!levels.empty() && std::find(levels.begin(), levels.end(), t.level) == levels.end()) return true;
    if (problems.empty()) return false;
    auto id = t.origin.find("id");
    return id == t.origin.end() || std::find(problems.begin(), problems.end(), std::stoi(id->second)) == problems.end();
  };
  specs.erase(std::remove_if(specs.begin(), specs.end(), dropped), specs.end());
  if (!e.tasks.split.empty()) {
    // Shuffled in name order with the split's seed: the same tasks and seed give the same split on every machine.
    std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::mt19937_64 rng(e.tasks.split_seed);
    std::shuffle(specs.begin(), specs.end(), rng);
    auto n_eval = static_cast<std::size_t>(std::ceil(e.tasks.eval_fraction * static_cast<double>(specs.size())));
    n_eval = std::min(n_eval, specs.size());
    if (e.tasks.split == "eval") specs.resize(n_eval);
    else specs.erase(specs.begin(), specs.begin() + static_cast<std::ptrdiff_t>(n_eval));
    std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  if (specs.empty()) e.fail("tasks", "the selection leaves no task");
  return specs;
}

void check_prompts(const Experiment& e, const std::vector<eval::TaskSpec>& tasks) {
  if (!language_model_policy(e.policy) || e.policy.prompt.kind != policy::PromptKind::kernelbench) return;
  try {  // the checkout first: without its prompts.toml no task's prompt can be built
    policy::kernelbench_prompts_toml(e.policy.prompt.kernelbench.kernelbench_dir);
  } catch (const policy::KernelBenchPromptError& err) {
    e.fail("policy.kernelbench_dir", err.what());
  }
  const policy::TaskPrompter prompter(e.policy.prompt, {e.eval.backend, e.eval.kind}, "");
  for (const auto& t : tasks) {
    try {
      prompter.prompt(t);
    } catch (const policy::TaskPromptError& err) {
      e.fail("tasks.names", err.what());
    } catch (const policy::KernelBenchPromptError& err) {
      e.fail("policy.kernelbench_dir", err.what());
    }
  }
}

}  // namespace crucible::experiment

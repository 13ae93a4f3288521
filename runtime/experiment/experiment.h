#pragma once
// An experiment as written in TOML: which mode, tasks, policy, rewards and devices. Every key is documented in
// docs/experiments.md. Reading is strict: a malformed experiment fails before any work, naming file, line and key.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/device.h"
#include "crucible/eval/eval_settings.h"
#include "crucible/eval/task_spec.h"
#include "lm/tokenizer/chat_message.h"
#include "lm/tokenizer/chat_template.h"
#include "rewards/advantage.h"
#include "policy/task_prompt.h"
#include "policy/teacher_context.h"
#include "rewards/reward.h"

namespace crucible::experiment {

// What a run does with its candidates (the top-level `mode`): trains a policy on them (GRPO), keeps the best of N
// samples, or trains per task at test time (TTT). Not how thoroughly each is evaluated (eval::EvalDepth).
enum class RunMode { grpo, best_of_n, ttt };

// Where samples come from: the embedded search over kernel templates, sources from files, or a language model.
enum class PolicyKind { search, replay, libtorch, openai };
// The language model's policy-gradient loss, and how a sequence's token terms are combined.
// sdpo: self-distillation from feedback, mixed with grpo_clip by sdpo_weight (policy/teacher_context.h).
enum class Loss { grpo_clip, importance_sampling, sdpo };
enum class Normalization { sequence_mean, token_sum, token_mean };

struct TaskSelection {
  std::vector<std::string> names;  // task names or paths to task files; empty: every task in `dir`
  std::vector<int> levels;         // keep only tasks of these levels; empty: all
  std::vector<int> problems;       // keep only imported tasks with these KernelBench problem ids; empty: all
  std::string split;               // "", "train" or "eval": a fixed-seed split of what the above select
  double eval_fraction = 0.2;      // 80/20, as the published runs split KernelBench's level 1
  uint64_t split_seed = 0;
  std::string dir;  // where names are looked up; empty: the checkout's configs/tasks
};

// kind = "libtorch": a Hugging Face model directory sampled by the native LibTorch model and trained with LoRA.
struct LmPolicyConfig {
  std::string model;          // the model directory (config.json, *.safetensors, tokenizer.json)
  eval::Device device;          // an evaluator on the same device waits while it works
  std::string dtype = "auto";  // auto (f32 on the CPU, bf16 on CUDA), f32, bf16, f16
  std::string adapter;        // a PEFT adapter directory to start from (ttt forks it per task); empty: fresh
  bool cuda_graphs = true;
  int max_batch = 0;  // rows decoded at once; more samples join as rows finish (0: all samples at once)
  int max_new_tokens = 1024;
  double top_p = 1.0;
  int top_k = 0;               // 0: off
  std::string system_prompt;   // empty: the chat format's default
  std::optional<lm::ChatFormat> chat_format;  // empty ("auto"): the model's (harmony for gpt-oss, qwen3 for Qwen3)
  lm::ReasoningEffort reasoning_effort = lm::ReasoningEffort::medium;  // chat_format harmony only
  // [policy.lora]
  int lora_rank = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.0;
  bool lora_rslora = false;
  std::vector<std::string> lora_targets{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  // [policy.train]
  double learning_rate = 1e-5;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0: no clipping
  int micro_batch = 1;         // sequences per forward/backward: a 1.5B model with 2k-token sequences needs 1
  bool activation_checkpointing = false;  // recompute blocks in the backward pass: larger micro-batches fit
  Loss loss = Loss::grpo_clip;
  Normalization normalization = Normalization::sequence_mean;  // token_sum: Dr. GRPO
  double clip_low = 0.2, clip_high = 0.2;
  double kl_coef = 0.0;
  bool measure_kl = false;  // the KL to the base as a metric without a penalty (one more forward pass per micro-batch)
  double max_logprob_mismatch = 0.0;  // > 0: drop sequences whose sampler and trainer log-probs disagree by more
  // loss = "sdpo": what the teacher reads, and the distillation's share of each token's loss (the rest: grpo_clip)
  policy::TeacherFeedback sdpo_feedback = policy::TeacherFeedback::execution;
  double sdpo_weight = 1.0;
};

// kind = "openai": a model served over an OpenAI-compatible API (vLLM, SGLang, `crucible serve`).
struct OpenAiConfig {
  std::string base_url;      // "http://127.0.0.1:8000/v1"
  std::string model;         // the served model's (or adapter's) name
  std::string api_key_env;   // the API key from this environment variable, or
  std::string api_key_file;  // from this file; neither: no key
  int concurrency = 8;       // requests in flight at once
  double timeout_s = 120;    // per request
  int retries = 3;           // after a failure to connect, a timeout, HTTP 429 or 5xx
  double backoff_s = 1.0;    // the first retry's wait, doubling
  int max_tokens = 1024;
  double top_p = 1.0;
  std::string system_prompt;
};

// [judge]: an auxiliary reward from a judge model served over an OpenAI-compatible API.
struct JudgeConfig {
  bool enabled = false;
  OpenAiConfig endpoint;            // base_url, model, key, timeouts, retries (max_tokens 256 by default)
  double weight = 0.2;              // reward += weight * score
  double when_correct_below = 1.0;  // judge a group while its share of correct samples is below this
  double temperature = 0.0;
};

struct PolicyConfig {
  PolicyKind kind = PolicyKind::search;
  std::string replay_dir;       // replay: <replay_dir>/<task>/*.cpp (*.cu on GPUs)
  double learning_rate = 0.5;   // search
  double temperature = 1.0;     // search and libtorch
  std::string checkpoint;  // search: a snapshot file to start from (ttt), empty: fresh
  LmPolicyConfig lm;       // libtorch
  OpenAiConfig openai;     // openai
  // libtorch and openai: which prompt the model is shown (`prompt`; KernelBench's for candidate = "kernelbench",
  // Crucible's otherwise) and, for KernelBench's, `kernelbench_dir`, `kernelbench_backend`, `kernelbench_option`.
  policy::PromptSettings prompt;
};

struct GrpoConfig {
  int steps = 10;
  int batch_size = 8;  // tasks per step
  int group_size = 8;  // samples per task
  int max_staleness = 1;
};

struct BestOfNConfig {
  int k = 64;
  int group_size = 8;  // samples asked of the policy at once (the sweep's compile and evaluation start early)
};

// Search over evaluated states (`[search]`): with kind = "puct", a group after a task's first samples improves on
// kernels chosen from the task's archive by PUCT (runtime/search/puct_archive.h) instead of sampling afresh.
enum class SearchKind { none, puct };
struct SearchConfig {
  SearchKind kind = SearchKind::none;
  double c = 1.0;
};

struct TttConfig {
  int steps = 15;
  int rollouts = 8;          // K per step
  int concurrent_tasks = 2;  // tasks adapting at once; their stages overlap
};

// The run's evaluation settings (what travels to evaluator nodes) and this node's own part: its devices.
struct EvalConfig : eval::RunEvalSettings {
  std::vector<eval::Device> devices{eval::Device::cpu()};  // one evaluator each; may be empty when nodes evaluate
  int compile_workers = 0;                                  // 0: one per core
};

// Evaluator nodes over the network (`crucible node --join`). Off unless `listen` is set.
// [monitor]: the live status page of a running experiment (runtime/monitor).
struct MonitorConfig {
  std::string listen;  // "HOST:PORT" (port 0: any free port); empty: no monitor
  std::string host;
  uint16_t port = 0;
  std::string token_env = "CRUCIBLE_MONITOR_TOKEN";  // where the token comes from; required off loopback
  bool enabled() const { return !listen.empty(); }
};

struct ClusterConfig {
  std::string listen;  // "HOST:PORT"
  std::string host;
  uint16_t port = 0;
  std::string secret_file;  // required with listen: the shared secret nodes prove
  double heartbeat_s = 1.0;
  double node_timeout_s = 10.0;  // a node silent this long is lost; its candidates go elsewhere
  // TLS (mutual: both sides show a certificate signed by the CA); all three or none.
  std::string tls_certificate, tls_key, tls_ca;
  bool enabled() const { return !listen.empty(); }
  bool tls() const { return !tls_certificate.empty(); }
};

struct Experiment {
  std::string name;
  RunMode mode = RunMode::grpo;
  std::vector<uint64_t> seeds{1};
  TaskSelection tasks;
  PolicyConfig policy;
  GrpoConfig grpo;
  BestOfNConfig best_of_n;
  TttConfig ttt;
  rewards::RewardSpec reward;
  rewards::AdvantageSpec advantage;
  rewards::MultiTurnSpec multi_turn;  // [multi_turn]: turns per trajectory, returns, gamma
  SearchConfig search;
  JudgeConfig judge;
  bool task_baseline = false;  // centre rewards by a per-task running baseline before grouping
  EvalConfig eval;
  ClusterConfig cluster;
  MonitorConfig monitor;
  std::string run_root = "runs";  // new runs go to run_root/<name>-<timestamp> unless --out says otherwise
  std::string text;               // the experiment as read, copied into the run directory
  std::string file;
  std::map<std::string, int64_t> key_lines;  // dotted key -> line, for errors found after parsing

  // An error about a key, found after parsing (a task that does not exist, a missing checkpoint): file, line, key.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
};

// Throws config::ConfigError (file, line, dotted key) on anything malformed, unknown or out of range.
// A relative tasks.dir is taken relative to `relative_to` when one is given (else to the current directory); it is
// then made absolute in `dir` and in `text`, so a run's copy of the text names the same directory from anywhere.
Experiment parse_experiment(const std::string& text, const std::string& file,
                            const std::filesystem::path& relative_to = {});
// Reads the file; a relative tasks.dir is relative to the file's directory.
Experiment load_experiment(const std::filesystem::path& path);
// The embedded default (configs/quickstart.toml, built in so a fresh checkout runs with no argument).
const std::string& default_experiment_text();

// What a run asks of the machine it starts on, checked there before it starts (a file read elsewhere, e.g. by
// `crucible report`, is not held to this machine): compile workers are threads each running a compiler.
constexpr int kCompileWorkersPerCore = 4;
void check_machine_limits(const Experiment& experiment, unsigned cores);
// run_root (or the first of its parents that exists) is a directory; throws config::ConfigError naming the key.
void check_run_root(const Experiment& experiment);

// "HOST:PORT" (a name, an IPv4 address, or an IPv6 one in brackets); throws std::invalid_argument.
std::pair<std::string, uint16_t> parse_host_port(const std::string& text);

std::string run_mode_name(RunMode mode);
std::string policy_kind_name(PolicyKind kind);
std::string loss_name(Loss loss);
std::string normalization_name(Normalization normalization);

// The tasks the experiment names, loaded and in a fixed order; a split keeps the train or eval share.
std::vector<eval::TaskSpec> resolve_tasks(const Experiment& experiment);

// The language-model policies' prompt for every task, built before any work: a task with no KernelBench problem, or a
// checkout that lacks what KernelBench's prompt needs, is a config::ConfigError naming the task or the checkout.
void check_prompts(const Experiment& experiment, const std::vector<eval::TaskSpec>& tasks);

}  // namespace crucible::experiment

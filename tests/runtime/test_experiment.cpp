// Experiments: the built-in quickstart parses, and every malformed experiment names file, line and key.
#include <doctest/doctest.h>

#include "config/toml_reader.h"
#include "experiment/experiment.h"
#include "experiment_support.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

const std::string kMinimal = R"(
[experiment]
name = "t"
mode = "grpo"

[tasks]
names = ["relu"]
)";

using test::failure;

}  // namespace

TEST_CASE("the built-in quickstart is a valid GRPO experiment over CPU tasks") {
  auto e = experiment::parse_experiment(experiment::default_experiment_text(), "<quickstart>");
  CHECK(e.name == "quickstart");
  CHECK(e.mode == experiment::RunMode::grpo);
  CHECK(e.grpo.max_staleness == 1);
  CHECK(e.eval.devices == std::vector<eval::Device>{eval::Device::cpu()});
  CHECK(experiment::resolve_tasks(e).size() == e.tasks.names.size());
  // The file in configs/ is what is built in.
  CHECK(test::read_file(test::source_dir() / "configs" / "quickstart.toml") == experiment::default_experiment_text());
}

TEST_CASE("shipped experiments parse") {
  for (const char* name : {"quickstart", "grpo_l1", "best_of_n_k64", "ttt_15", "grpo_lm", "multi_turn_trloo", "ttt_puct",
                           "judge_bootstrap", "ttt_sdpo", "ttt_trimul"}) {
    CAPTURE(name);
    auto e = experiment::load_experiment(test::source_dir() / "configs" / (std::string(name) + ".toml"));
    CHECK_FALSE(experiment::resolve_tasks(e).empty());
  }
}

TEST_CASE("the seeds' recipes with their own policy, gpt-oss-120b, say what the seeds ran") {
  // The GRPO recipe looks its tasks up where `crucible tasks import` put KernelBench's level 1, beside the configs.
  const test::ScratchDir checkout("gpt-oss-recipes");
  fs::create_directories(checkout.path() / "configs");
  fs::create_directories(checkout.path() / "tasks" / "kernelbench");
  fs::copy_file(test::source_dir() / "configs" / "grpo_gpt_oss_kernelbench.toml",
                checkout.path() / "configs" / "grpo_gpt_oss_kernelbench.toml");
  const auto grpo = experiment::load_experiment(checkout.path() / "configs" / "grpo_gpt_oss_kernelbench.toml");
  CHECK(grpo.policy.kind == experiment::PolicyKind::libtorch);
  CHECK(grpo.policy.temperature == 0.25);
  CHECK(grpo.policy.lm.max_new_tokens == 1024);
  CHECK(grpo.policy.lm.lora_rank == 16);
  CHECK(grpo.policy.lm.learning_rate == 1e-5);
  CHECK(grpo.policy.lm.chat_format == lm::ChatFormat::harmony);
  CHECK(grpo.policy.lm.reasoning_effort == lm::ReasoningEffort::medium);
  CHECK(grpo.grpo.group_size == 8);
  CHECK(grpo.grpo.batch_size == 8);
  CHECK(grpo.eval.kind == eval::CandidateKind::kernelbench);
  CHECK(grpo.tasks.levels == std::vector<int>{1});
  const std::vector<std::string> attention_and_experts{"q_proj", "k_proj", "v_proj", "o_proj",
                                                       "mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  CHECK(grpo.policy.lm.lora_targets == attention_and_experts);
  const auto ttt = experiment::load_experiment(test::source_dir() / "configs" / "ttt_trimul_gpt_oss.toml");
  CHECK(ttt.policy.lm.lora_rank == 32);
  CHECK(ttt.policy.lm.learning_rate == 4e-5);
  CHECK(ttt.policy.lm.kl_coef == 0.1);
  CHECK(ttt.policy.lm.reasoning_effort == lm::ReasoningEffort::high);
  CHECK(ttt.advantage.kind == rewards::AdvantageKind::entropic_adaptive_beta);
  CHECK(ttt.policy.lm.lora_targets == attention_and_experts);
  CHECK_FALSE(experiment::resolve_tasks(ttt).empty());
}

TEST_CASE("Triton candidates are an [eval] choice for CUDA devices, refused on the CPU") {
  auto e = experiment::load_experiment(test::source_dir() / "configs" / "ttt_trimul.toml");
  CHECK(e.eval.kind == eval::CandidateKind::triton);
  CHECK(e.eval.language() == "triton");
  CHECK(e.eval.source_extension() == "py");
  CHECK(e.grpo.batch_size == 4);
  CHECK(e.grpo.group_size == 16);
  CHECK(e.reward.scale == 1500.0);
  CHECK(e.eval.launches == eval::Launches::queued);
  auto cpu = failure(kMinimal + "[eval]\ncandidate = \"triton\"\n");
  CHECK(cpu.key() == "eval.candidate");
  CHECK(std::string(cpu.what()).find("GPU") != std::string::npos);
  auto typo = failure(kMinimal + "[eval]\ncandidate = \"python\"\n");
  CHECK(typo.key() == "eval.candidate");
  CHECK(experiment::parse_experiment(kMinimal, "min.toml").eval.kind == eval::CandidateKind::native);
}

TEST_CASE("[eval] torch_ops: allow or forbid, typed once, for KernelBench-format candidates only") {
  const std::string kb = kMinimal + "[eval]\ncandidate = \"kernelbench\"\n";
  struct Row {
    std::string text;
    bool forbid;
  };
  for (const Row& row : {Row{kb, false}, Row{kb + "torch_ops = \"allow\"\n", false},
                         Row{kb + "torch_ops = \"forbid\"\n", true}}) {
    CAPTURE(row.text);
    CHECK(experiment::parse_experiment(row.text, "kb.toml").eval.forbid_torch_ops == row.forbid);
  }
  struct Bad {
    std::string text;
    int64_t line;
    std::string says;
  };
  for (const Bad& bad : {Bad{kb + "torch_ops = \"Forbid\"\n", 10, "unknown torch_ops 'Forbid' (allow, forbid)"},
                         Bad{kb + "torch_ops = true\n", 10, "string"},
                         Bad{kMinimal + "[eval]\ntorch_ops = \"forbid\"\n", 9, "candidate = \"kernelbench\""}}) {
    CAPTURE(bad.text);
    const auto e = failure(bad.text);
    CHECK(e.file() == "bad.toml");
    CHECK(e.line() == bad.line);
    CHECK(e.key() == "eval.torch_ops");
    CHECK(std::string(e.what()).find(bad.says) != std::string::npos);
  }
}

TEST_CASE("how GPU calls are timed is an [eval] choice: eager by default, queued on request, nothing else") {
  CHECK(experiment::parse_experiment(kMinimal, "min.toml").eval.launches == eval::Launches::eager);
  auto queued = experiment::parse_experiment(
      kMinimal + "[eval]\ndevices = [\"cuda:0\"]\ncandidate = \"triton\"\nlaunches = \"queued\"\n", "q.toml");
  CHECK(queued.eval.launches == eval::Launches::queued);
  auto on_cpu = failure(kMinimal + "[eval]\nlaunches = \"queued\"\n");
  CHECK(on_cpu.key() == "eval.launches");
  CHECK(std::string(on_cpu.what()).find("Triton") != std::string::npos);
  auto native = failure(kMinimal + "[eval]\ndevices = [\"cuda:0\"]\nlaunches = \"queued\"\n");
  CHECK(native.key() == "eval.launches");
  CHECK(failure(kMinimal + "[eval]\nlaunches = \"held\"\n").key() == "eval.launches");
}

TEST_CASE("defaults fill what an experiment leaves out") {
  auto e = experiment::parse_experiment(kMinimal, "min.toml");
  CHECK(e.grpo.group_size == 8);
  CHECK(e.grpo.batch_size == 8);
  CHECK(e.ttt.steps == 15);
  CHECK(e.best_of_n.k == 64);
  CHECK(e.seeds == std::vector<uint64_t>{1});
  CHECK(e.reward.kind == rewards::RewardKind::speedup);
}

TEST_CASE("malformed experiments fail with file, line and key") {
  auto e = failure(kMinimal + "[grpo]\nsteps = 0\n");
  CHECK(e.file() == "bad.toml");
  CHECK(e.key() == "grpo.steps");
  CHECK(e.line() == 9);

  e = failure(kMinimal + "[grpo]\ngroup_sise = 4\n");  // a typo is an error, not a silent default
  CHECK(std::string(e.what()).find("did you mean 'group_size'?") != std::string::npos);
  CHECK(e.key() == "grpo.group_sise");
  CHECK(std::string(e.what()).find("unknown key") != std::string::npos);

  e = failure(kMinimal + "[reward]\nkind = \"speedy\"\n");
  CHECK(e.key() == "reward.kind");
  CHECK(e.line() == 9);

  e = failure(kMinimal + "[eval]\ndevices = [\"tpu:0\"]\n");
  CHECK(e.key() == "eval.devices");
  for (const char* devices : {"[\"cuda\"]", "[\"cuda:01\"]", "[\"cuda:x\"]", "[\"cpu\", \"cuda:0\"]", "[\"cuda:1\", \"cuda:1\"]"}) {
    CAPTURE(devices);
    CHECK(failure(kMinimal + "[eval]\ndevices = " + devices + "\n").key() == "eval.devices");
  }
  CHECK(failure(kMinimal + "[eval]\nmode = \"thorough\"\n").key() == "eval.mode");
  CHECK(failure(kMinimal + "[multi_turn]\nturns = 0\n").key() == "multi_turn.turns");
  CHECK(failure(kMinimal + "[multi_turn]\nturns = 17\n").key() == "multi_turn.turns");
  CHECK(failure(kMinimal + "[multi_turn]\nturns = 2\nreturns = \"sum\"\n").key() == "multi_turn.returns");
  CHECK(failure(kMinimal + "[multi_turn]\nturns = 2\ngamma = 1.5\n").key() == "multi_turn.gamma");
  CHECK(failure(kMinimal + "[multi_turn]\nturns = 2\n[grpo]\ngroup_size = 1000\n").key() == "multi_turn.turns");
  CHECK(failure(kMinimal + "[search]\nkind = \"mcts\"\n").key() == "search.kind");
  CHECK(failure(kMinimal + "[policy]\nkind = \"openai\"\nmodel = \"m\"\n").key() == "policy.base_url");
  CHECK(failure(kMinimal + "[policy]\nkind = \"openai\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n").key() ==
        "policy.base_url");
  CHECK(failure(kMinimal + "[policy]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n"
                           "dtype = \"bf16\"\n").key() == "policy.dtype");
  CHECK(failure(kMinimal + "[policy]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n"
                           "temperature = 2.5\n").key() == "policy.temperature");  // the API's limit is 2
  CHECK(failure(kMinimal + "[judge]\nbase_url = \"http://x/v1\"\nmodel = \"j\"\nweight = -1\n").key() ==
        "judge.weight");
  CHECK(failure(kMinimal + "[search]\nkind = \"puct\"\n").key() == "search.kind");  // grpo: no archive to reuse
  e = failure(kMinimal + "[advantage]\nkind = \"trloo\"\n");  // leave-one-out per turn needs turns
  CHECK(e.key() == "advantage.kind");
  CHECK(std::string(e.what()).find("[multi_turn] turns") != std::string::npos);

  e = failure("[experiment]\nname = \"t\"\nmode = \"grpo\"\n");
  CHECK(e.key() == "tasks");

  e = failure("[experiment]\nname = \"t\"\nseeds = [1, 2, 1]\n[tasks]\nnames = [\"relu\"]\n");
  CHECK(e.key() == "experiment.seeds");
  CHECK(e.line() == 3);
  CHECK(std::string(e.what()).find("seed 1 is listed twice") != std::string::npos);

  e = failure("[experiment]\nname = \"t\"\nmode = grpo\n");  // TOML syntax
  CHECK(e.line() == 3);

  e = failure(R"([experiment]
name = "t"
mode = "sweep"
[tasks]
names = ["relu"]
)");
  CHECK(e.key() == "experiment.mode");
  CHECK(e.line() == 3);
}

TEST_CASE("a libtorch policy: model, sampling, LoRA and training keys, checked strictly") {
  auto e = experiment::parse_experiment(kMinimal + R"([policy]
kind = "libtorch"
model = "models/qwen"
device = "cuda:1"
temperature = 0.8
max_new_tokens = 512
top_p = 0.95
system_prompt = "You write kernels."
[policy.lora]
rank = 32
targets = ["q_proj", "v_proj"]
[policy.train]
learning_rate = 2e-6
loss = "importance_sampling"
normalization = "token_sum"
kl_coef = 0.01
measure_kl = true
max_logprob_mismatch = 0.5
)", "lm.toml");
  CHECK(e.policy.kind == experiment::PolicyKind::libtorch);
  CHECK(e.policy.temperature == 0.8);
  const auto& m = e.policy.lm;
  CHECK(m.model == "models/qwen");
  CHECK(m.device == eval::Device::cuda(1));
  CHECK(m.max_new_tokens == 512);
  CHECK(m.top_p == 0.95);
  CHECK(m.system_prompt == "You write kernels.");
  CHECK(m.lora_rank == 32);
  CHECK(m.lora_alpha == 32);  // default
  CHECK(m.lora_targets == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(m.learning_rate == 2e-6);
  CHECK(m.micro_batch == 1);
  CHECK(m.loss == experiment::Loss::importance_sampling);
  CHECK(m.normalization == experiment::Normalization::token_sum);
  CHECK(m.kl_coef == 0.01);
  CHECK(m.measure_kl);
  CHECK(m.max_logprob_mismatch == 0.5);

  auto err = failure(kMinimal + "[policy]\nkind = \"libtorch\"\n");
  CHECK(err.key() == "policy.model");
  err = failure(kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n[policy.train]\nloss = \"ppo\"\n");
  CHECK(err.key() == "policy.train.loss");
  CHECK(std::string(err.what()).find("grpo_clip") != std::string::npos);
  err = failure(kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n[policy.lora]\nrank = 0\n");
  CHECK(err.key() == "policy.lora.rank");
  err = failure(kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n[policy.train]\nlr = 1e-5\n");
  CHECK(err.key() == "policy.train.lr");
  err = failure(kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\ncheckpoint = \"s.json\"\n");
  CHECK(err.key() == "policy.checkpoint");
  err = failure(kMinimal + "[policy]\nkind = \"search\"\nmodel = \"m\"\n");  // a model key on the search policy
  CHECK(err.key() == "policy.model");

  const std::string lm = kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n";
  CHECK(experiment::parse_experiment(lm + "[policy.train]\nactivation_checkpointing = true\nmicro_batch = 8\n", "c")
            .policy.lm.activation_checkpointing);
  err = failure(lm + "[policy.lora]\ndropout = 0.1\n[policy.train]\nactivation_checkpointing = true\n");
  CHECK(std::string(err.what()).find("dropout must be 0") != std::string::npos);
}

TEST_CASE("a libtorch policy's chat format and reasoning effort: typed, auto by default, checked") {
  const std::string lm = kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n";
  auto m = experiment::parse_experiment(lm, "a").policy.lm;
  CHECK(!m.chat_format);  // auto: the model's own
  CHECK(m.reasoning_effort == lm::ReasoningEffort::medium);
  m = experiment::parse_experiment(lm + "chat_format = \"harmony\"\nreasoning_effort = \"high\"\n", "b").policy.lm;
  CHECK(m.chat_format == lm::ChatFormat::harmony);
  CHECK(m.reasoning_effort == lm::ReasoningEffort::high);
  m = experiment::parse_experiment(lm + "reasoning_effort = \"low\"\n", "c").policy.lm;  // auto may be harmony
  CHECK(m.reasoning_effort == lm::ReasoningEffort::low);
  CHECK(experiment::parse_experiment(lm + "chat_format = \"qwen3\"\n", "d").policy.lm.chat_format == lm::ChatFormat::qwen3);

  struct Bad {
    std::string text, key, says;
  };
  for (const auto& bad : std::vector<Bad>{
           {lm + "chat_format = \"gpt-oss\"\n", "policy.chat_format", "auto, chatml, llama3, qwen3, harmony"},
           {lm + "reasoning_effort = \"max\"\n", "policy.reasoning_effort", "low, medium, high"},
           {lm + "chat_format = \"chatml\"\nreasoning_effort = \"high\"\n", "policy.reasoning_effort", "harmony"},
           {kMinimal + "[policy]\nkind = \"search\"\nchat_format = \"harmony\"\n", "policy.chat_format", "libtorch"},
           {kMinimal + "[policy]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n"
                       "reasoning_effort = \"high\"\n", "policy.reasoning_effort", "libtorch"},
       }) {
    CAPTURE(bad.text);
    const auto err = failure(bad.text);
    CHECK(err.key() == bad.key);
    CHECK(std::string(err.what()).find(bad.says) != std::string::npos);
  }
}

TEST_CASE("loss = sdpo: the teacher's feedback and the distillation's share, only with that loss") {
  const std::string lm = kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n[policy.train]\n";
  auto m = experiment::parse_experiment(lm + "loss = \"sdpo\"\n", "a").policy.lm;
  CHECK(m.loss == experiment::Loss::sdpo);
  CHECK(m.sdpo_feedback == policy::TeacherFeedback::execution);  // defaults: the evaluator's feedback, pure SDPO
  CHECK(m.sdpo_weight == 1.0);
  m = experiment::parse_experiment(lm + "loss = \"sdpo\"\nsdpo_feedback = \"successful_sibling\"\nsdpo_weight = 0.5\n", "b")
          .policy.lm;
  CHECK(m.sdpo_feedback == policy::TeacherFeedback::successful_sibling);
  CHECK(m.sdpo_weight == 0.5);

  struct Bad {
    std::string keys, key, says;
  };
  for (const auto& bad : std::vector<Bad>{
           {"loss = \"sdpo\"\nsdpo_feedback = \"sibling\"\n", "policy.train.sdpo_feedback", "successful_sibling"},
           {"loss = \"sdpo\"\nsdpo_weight = 0\n", "policy.train.sdpo_weight", ""},
           {"loss = \"sdpo\"\nsdpo_weight = 1.5\n", "policy.train.sdpo_weight", ""},
           {"sdpo_feedback = \"execution\"\n", "policy.train.sdpo_feedback", "loss = \"sdpo\""},
           {"loss = \"grpo_clip\"\nsdpo_weight = 0.5\n", "policy.train.sdpo_weight", "loss = \"sdpo\""},
       }) {
    CAPTURE(bad.keys);
    const auto err = failure(lm + bad.keys);
    CHECK(err.key() == bad.key);
    CHECK(std::string(err.what()).find(bad.says) != std::string::npos);
  }
}

TEST_CASE("errors found after parsing still point at the key's line") {
  auto e = experiment::parse_experiment(R"([experiment]
name = "t"
[tasks]
names = ["relu", "no_such_task"]
)",
                                        "late.toml");
  try {
    experiment::resolve_tasks(e);
    FAIL("resolved a task that does not exist");
  } catch (const config::ConfigError& err) {
    CHECK(err.key() == "tasks.names");
    CHECK(err.line() == 4);
  }
}

TEST_CASE("a split is fixed by its seed and partitions the tasks") {
  const std::string base = R"([experiment]
name = "t"
[tasks]
levels = [1]
split_seed = 7
eval_fraction = 0.25
)";
  auto train = experiment::resolve_tasks(experiment::parse_experiment(base + "split = \"train\"\n", "a"));
  auto eval_set = experiment::resolve_tasks(experiment::parse_experiment(base + "split = \"eval\"\n", "b"));
  auto again = experiment::resolve_tasks(experiment::parse_experiment(base + "split = \"eval\"\n", "c"));
  CHECK(train.size() + eval_set.size() == 16);
  CHECK(eval_set.size() == 4);
  REQUIRE(again.size() == eval_set.size());
  for (std::size_t i = 0; i < again.size(); ++i) {
    CHECK(again[i].name == eval_set[i].name);
    for (const auto& t : train) CHECK(t.name != eval_set[i].name);
  }
}

TEST_CASE("tasks are selected by level and by KernelBench problem id, then split 80/20 by default") {
  const std::string fixtures = (test::source_dir() / "tests" / "fixtures" / "torchscript").string();
  auto select = [&](const std::string& keys) {
    return experiment::resolve_tasks(experiment::parse_experiment("[experiment]\nname = \"t\"\n[tasks]\n" + keys, "sel.toml"));
  };
  CHECK(select("levels = [1]\n").size() == 16);  // every shipped task is level 1
  auto imported = select("dir = \"" + fixtures + "\"\nproblems = [1]\n");
  REQUIRE(imported.size() == 1);
  CHECK(imported[0].name == "bias_relu");
  CHECK(select("dir = \"" + fixtures + "\"\nlevels = [2]\n").size() == 1);
  CHECK_THROWS_AS(select("dir = \"" + fixtures + "\"\nproblems = [2]\n"), config::ConfigError);
  CHECK_THROWS_AS(select("levels = [2]\n"), config::ConfigError);  // the selection leaves no task
  CHECK(failure("[experiment]\nname = \"t\"\n[tasks]\nlevels = [1.5]\n").key() == "tasks.levels");
  auto e = experiment::parse_experiment("[experiment]\nname = \"t\"\n[tasks]\nlevels = [1]\nsplit = \"train\"\n", "s");
  CHECK(e.tasks.eval_fraction == 0.2);
  CHECK(experiment::resolve_tasks(e).size() == 16 - 4);  // ceil(0.2 * 16) held out
}

TEST_CASE("[cluster]: off by default, listen needs a secret, a HOST:PORT and consistent TLS keys") {
  auto plain = experiment::parse_experiment(kMinimal, "min.toml");
  CHECK_FALSE(plain.cluster.enabled());
  CHECK(plain.eval.backend == eval::Backend::cpu);

  auto e = experiment::parse_experiment(kMinimal + R"([eval]
devices = []
backend = "cuda"
[cluster]
listen = "[::1]:7400"
secret_file = "run.secret"
heartbeat_s = 0.5
node_timeout_s = 5
)", "c.toml");
  CHECK(e.cluster.enabled());
  CHECK(e.cluster.host == "::1");
  CHECK(e.cluster.port == 7400);
  CHECK(e.cluster.node_timeout_s == 5);
  CHECK(e.eval.devices.empty());
  CHECK(e.eval.backend == eval::Backend::cuda);
  CHECK_FALSE(e.cluster.tls());

  CHECK(failure(kMinimal + "[eval]\ndevices = []\n").key() == "eval.backend");
  CHECK(failure(kMinimal + "[eval]\ndevices = []\nbackend = \"cpu\"\n").key() == "eval.devices");  // nobody evaluates
  CHECK(failure(kMinimal + "[eval]\ndevices = [\"cpu\"]\nbackend = \"cuda\"\n").key() == "eval.backend");
  CHECK(failure(kMinimal + "[cluster]\nlisten = \"0.0.0.0:7400\"\n").key() == "cluster.secret_file");
  CHECK(failure(kMinimal + "[cluster]\nlisten = \"7400\"\nsecret_file = \"s\"\n").key() == "cluster.listen");
  CHECK(failure(kMinimal + "[cluster]\nlisten = \"h:99999\"\nsecret_file = \"s\"\n").key() == "cluster.listen");
  CHECK(failure(kMinimal + "[cluster]\nheartbeat_s = 2\nnode_timeout_s = 3\n").key() == "cluster.node_timeout_s");
  CHECK(failure(kMinimal + "[cluster]\ntls_certificate = \"c.pem\"\n").key() == "cluster.tls_certificate");
  CHECK_THROWS_AS(experiment::parse_host_port("host:"), std::invalid_argument);
  CHECK(experiment::parse_host_port("gpu-box:1").second == 1);
}

namespace {

// An experiment whose [experiment] table holds `keys` (from line 2 on).
std::string with_experiment(const std::string& keys) {
  return "[experiment]\n" + keys + "[tasks]\nnames = [\"relu\"]\n";
}

std::string repeated(const std::string& part, int times, const std::string& separator = "") {
  std::string out;
  for (int i = 0; i < times; ++i) out += (i ? separator : "") + part;
  return out;
}

struct Refusal {
  std::string text;   // the whole experiment
  std::string key;    // the dotted key the error names
  int64_t line;       // and its line
  std::string says;   // a fragment of the message
};

void check_refusals(const std::vector<Refusal>& cases) {
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const auto e = failure(c.text);
    CHECK(e.key() == c.key);
    CHECK(e.line() == c.line);
    CHECK(std::string(e.what()).find("bad.toml:" + std::to_string(c.line) + ": key '" + c.key + "'") == 0);
    CHECK(std::string(e.what()).find(c.says) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("every count in an experiment is range-checked as read, before it is narrowed") {
  const std::string lm = kMinimal + "[policy]\nkind = \"libtorch\"\nmodel = \"m\"\n";  // keys from line 11
  const std::string served = kMinimal + "[policy]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n";
  check_refusals({
      // Threads: a million compile workers would hang the run at the process limit.
      {kMinimal + "[eval]\ncompile_workers = 1000000\n", "eval.compile_workers", 9, "between 0 and 1024, got 1000000"},
      {kMinimal + "[eval]\ncompile_workers = -1\n", "eval.compile_workers", 9, "got -1"},
      // 2^32 + 1 wrapped to 1 when narrowed to an int.
      {kMinimal + "[eval]\ncorrectness_trials = 4294967297\n", "eval.correctness_trials", 9, "got 4294967297"},
      {kMinimal + "[eval]\ntiming_trials = 1000000000\n", "eval.timing_trials", 9, "between -1 and 1000"},
      {kMinimal + "[eval]\ntiming_trials = 0\n", "eval.timing_trials", 9, "or -1"},
      {kMinimal + "[eval]\ntiming_trials = 1e9\n", "eval.timing_trials", 9, "expected an integer, got float"},
      {kMinimal + "[grpo]\nsteps = 1000001\n", "grpo.steps", 9, "between 1 and 1000000"},
      {kMinimal + "[grpo]\nbatch_size = 10001\n", "grpo.batch_size", 9, "between 1 and 10000"},
      {kMinimal + "[grpo]\ngroup_size = 100000\n", "grpo.group_size", 9, "between 1 and 99999"},
      {kMinimal + "[grpo]\nmax_staleness = 101\n", "grpo.max_staleness", 9, "between 0 and 100"},
      {kMinimal + "[best_of_n]\nk = 4294967297\n", "best_of_n.k", 9, "got 4294967297"},
      {kMinimal + "[best_of_n]\ngroup_size = 100000\n", "best_of_n.group_size", 9, "between 1 and 99999"},
      {kMinimal + "[ttt]\nsteps = 0\n", "ttt.steps", 9, "between 1 and 1000000"},
      {kMinimal + "[ttt]\nrollouts = 100000\n", "ttt.rollouts", 9, "between 1 and 99999"},
      {kMinimal + "[ttt]\nconcurrent_tasks = 257\n", "ttt.concurrent_tasks", 9, "between 1 and 256"},
      {kMinimal + "[multi_turn]\nturns = 4294967297\n", "multi_turn.turns", 9, "between 1 and 16"},
      {kMinimal + "[reward]\nalpha = nan\n", "reward.alpha", 9, "must be in"},
      {kMinimal + "[reward]\ngamma = inf\n", "reward.gamma", 9, "must be in"},
      {lm + "max_new_tokens = 1000000\n", "policy.max_new_tokens", 11, "between 1 and 131072"},
      {lm + "max_batch = 5000\n", "policy.max_batch", 11, "between 0 and 4096"},
      {lm + "top_k = 4294967297\n", "policy.top_k", 11, "got 4294967297"},
      {lm + "[policy.lora]\nrank = 1025\n", "policy.lora.rank", 12, "between 1 and 1024"},
      {lm + "[policy.train]\nmicro_batch = 0\n", "policy.train.micro_batch", 12, "between 1 and 4096"},
      {served + "concurrency = 1000000\n", "policy.concurrency", 12, "between 1 and 256"},
      {served + "retries = 101\n", "policy.retries", 12, "between 0 and 100"},
      {served + "max_tokens = 4294967297\n", "policy.max_tokens", 12, "got 4294967297"},
      {kMinimal + "[judge]\nbase_url = \"http://x/v1\"\nmodel = \"j\"\nconcurrency = 257\n", "judge.concurrency", 11,
       "between 1 and 256"},
      {"[experiment]\nname = \"t\"\n[tasks]\nlevels = [4294967297]\n", "tasks.levels", 4, "between 0 and 100"},
      {"[experiment]\nname = \"t\"\n[tasks]\nproblems = [-1]\n", "tasks.problems", 4, "got -1"},
      {"[experiment]\nname = \"t\"\n[tasks]\nnames = [\"relu\"]\nsplit_seed = -1\n", "tasks.split_seed", 5, "got -1"},
  });
}

TEST_CASE("seeds are integers, the name is one plain directory name, and no string holds a NUL") {
  check_refusals({
      // 1e300 and inf ran as seed 0.
      {with_experiment("name = \"t\"\nseeds = [1e300]\n"), "experiment.seeds", 3, "found a float"},
      {with_experiment("name = \"t\"\nseeds = [inf]\n"), "experiment.seeds", 3, "found a float"},
      {with_experiment("name = \"t\"\nseeds = [-1]\n"), "experiment.seeds", 3, "got -1"},
      {with_experiment("name = \"t\"\nseeds = []\n"), "experiment.seeds", 3, "at least one seed"},
      {with_experiment("name = \"t\"\nseeds = [\"1\"]\n"), "experiment.seeds", 3, "found a string"},
      // A NUL cut the run directory's path short and left a stray directory.
      {with_experiment("name = \"a\\u0000b\"\n"), "experiment.name", 2, "NUL"},
      {with_experiment("name = \"a/b\"\n"), "experiment.name", 2, "no '/'"},
      {with_experiment("name = \"a\\\\b\"\n"), "experiment.name", 2, "no '/'"},
      {with_experiment("name = \"..\"\n"), "experiment.name", 2, "'..'"},
      {with_experiment("name = \".\"\n"), "experiment.name", 2, "'..'"},
      {with_experiment("name = \"a\\u001b[31mb\"\n"), "experiment.name", 2, "control characters"},
      {with_experiment("name = \"\"\n"), "experiment.name", 2, "1 to 100 bytes"},
      {with_experiment("name = \"" + std::string(101, 'x') + "\"\n"), "experiment.name", 2, "1 to 100 bytes"},
      {with_experiment("name = \"t\"\nrun_root = \"\"\n"), "experiment.run_root", 3, "name a directory"},
      {with_experiment("name = \"t\"\nrun_root = \"runs\\u0000x\"\n"), "experiment.run_root", 3, "NUL"},
      {"[experiment]\nname = \"t\"\n[tasks]\nnames = [\"re\\u0000lu\"]\n", "tasks.names", 4, "NUL"},
  });
  CHECK(experiment::parse_experiment(with_experiment("name = \"grpo-l1_v2.b\"\nseeds = [0, 9223372036854775807]\n"), "ok")
            .seeds == std::vector<uint64_t>{0, 9223372036854775807ull});
}

TEST_CASE("echoed text is bounded: a huge unknown key or value gives a short error line") {
  const std::string key(500'000, 'k');
  auto e = failure(kMinimal + "[grpo]\n" + key + " = 1\n");
  CHECK(e.key() == "grpo." + key);
  CHECK(e.line() == 9);
  CHECK(std::string(e.what()).size() < 1500);
  CHECK(std::string(e.what()).find("bytes cut") != std::string::npos);
  CHECK(std::string(e.what()).find("unknown key") != std::string::npos);

  e = failure(with_experiment("name = \"t\"\nmode = \"" + std::string(500'000, 'm') + "\\u001b\"\n"));
  CHECK(e.key() == "experiment.mode");
  const std::string what = e.what();
  CHECK(what.size() < 1500);
  CHECK(what.find("(grpo, best_of_n, ttt)") != std::string::npos);  // the tail that says what was expected
  CHECK(what.find('\x1b') == std::string::npos);
}

TEST_CASE("TOML nested beyond the bound is refused before parsing, naming file and line") {
  struct Deep {
    std::string text;
    int64_t line;
  };
  const std::vector<Deep> deep = {
      // The red team's file: 50,000 header parts overflowed the parser's stack.
      {"[" + repeated("a", 50'000, ".") + "]\nx = 1\n", 1},
      {"[[" + repeated("a", 40, ".") + "]]\n", 1},
      {"x = 1\n[t]\n" + repeated("a", 40, ".") + " = 1\n", 3},
      {"x = " + repeated("[", 40) + repeated("]", 40) + "\n", 1},
      {"x = " + repeated("{a = ", 40) + "1" + repeated("}", 40) + "\n", 1},
      {"x = [\n" + repeated("[\n", 40) + repeated("]\n", 41), 33},  // line n opens the array of depth n
      {"x = [{" + repeated("a", 40, ".") + " = 1}]\n", 1},
      {"[" + repeated("a", 33, ".") + "]\n", 1},
      {"x = " + repeated("[", 33) + repeated("]", 33) + "\n", 1},
  };
  for (const auto& d : deep) {
    CAPTURE(d.text.substr(0, 200));
    try {
      config::parse_toml_text(d.text, "deep.toml");
      FAIL("parsed");
    } catch (const config::ConfigError& e) {
      CHECK(e.line() == d.line);
      CHECK(std::string(e.what()).find("deep.toml:" + std::to_string(d.line) + ": nested deeper than 32") == 0);
    }
  }
  // What looks deep inside strings, comments and quoted keys is not; 32 levels are allowed.
  const std::vector<std::string> shallow = {
      "s = \"" + repeated("[{.", 1000) + "\\\"" + repeated("[", 100) + "\"\n",
      "s = '" + repeated("[{.\\", 1000) + "'\n",
      "s = \"\"\"a \\\"\"\" " + repeated("[", 100) + "\nb\\\n" + repeated("{", 100) + "\"\"\"\nt = 1\n",
      "s = '''x '' " + repeated("[.", 100) + "'''''\n[" + repeated("a", 32, ".") + "]\n",
      "# " + repeated("[", 100) + repeated("a.", 100) + "\nx = 1 # [[[[\n",
      "[\"" + repeated("a.", 100) + "\"]\n'" + repeated("b.", 100) + "' = [\"" + repeated("[", 100) + "\"]\n",
      "[" + repeated("a", 32, ".") + "]\n",
      "x = " + repeated("[", 32) + repeated("]", 32) + "\n",
      "x = [1.5, 2.25, {a = 1.0, b = [3.5]}]\ny = 1979-05-27T07:32:00.999Z\n",
  };
  for (const auto& text : shallow) {
    CAPTURE(text.substr(0, 200));
    CHECK_NOTHROW(config::parse_toml_text(text, "shallow.toml"));
  }
}

TEST_CASE("an experiment file is a regular file of at most 1 MiB") {
  test::ScratchDir dir("experiment-size");
  const auto big = dir.path() / "big.toml";
  test::write_file(big, kMinimal + "# " + std::string(config::kMaxTomlBytes, 'x') + "\n");
  for (const auto& [path, says] : std::vector<std::pair<std::filesystem::path, std::string>>{
           {big, "larger than 1048576 bytes"}, {dir.path(), "not a regular file"}, {dir.path() / "no.toml", "not found"}}) {
    CAPTURE(path);
    try {
      experiment::load_experiment(path);
      FAIL("loaded");
    } catch (const config::ConfigError& e) {
      CHECK(e.file() == path.string());
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  }
  CHECK_THROWS_AS(experiment::parse_experiment(test::read_file(big), "big.toml"), config::ConfigError);
}

TEST_CASE("compile workers are bounded by the cores of the machine that runs the experiment") {
  const auto e = experiment::parse_experiment(kMinimal + "[eval]\ncompile_workers = 9\n", "w.toml");
  CHECK_NOTHROW(experiment::check_machine_limits(e, 3));
  try {
    experiment::check_machine_limits(e, 2);
    FAIL("9 workers on 2 cores");
  } catch (const config::ConfigError& err) {
    CHECK(err.key() == "eval.compile_workers");
    CHECK(err.line() == 9);
    CHECK(std::string(err.what()).find("at most 4 per core: 8") != std::string::npos);
  }
}

TEST_CASE("run_root naming a file is refused with file, line and key") {
  test::ScratchDir dir("run-root");
  test::write_file(dir.path() / "file", "x");
  for (const std::string root : {"file", "file/runs"}) {
    CAPTURE(root);
    const auto e = experiment::parse_experiment(
        with_experiment("name = \"t\"\nrun_root = \"" + (dir.path() / root).string() + "\"\n"), "root.toml");
    try {
      experiment::check_run_root(e);
      FAIL("accepted");
    } catch (const config::ConfigError& err) {
      CHECK(err.key() == "experiment.run_root");
      CHECK(err.line() == 3);
    }
  }
  const auto fresh = experiment::parse_experiment(
      with_experiment("name = \"t\"\nrun_root = \"" + (dir.path() / "new" / "runs").string() + "\"\n"), "ok.toml");
  CHECK_NOTHROW(experiment::check_run_root(fresh));
}

TEST_CASE("a relative tasks.dir is relative to the experiment file, and the text keeps it as an absolute path") {
  test::ScratchDir dir("tasks-dir");
  // A folder name TOML must escape, so the rewritten text is checked to parse back to the same directory.
  const auto folder = dir.path() / "exp \"q\" \\ d";
  std::filesystem::create_directories(folder / "my tasks");
  const auto file = folder / "e.toml";
  test::write_file(file, "[experiment]\nname = \"t\"\nmode = \"grpo\"\n\n[tasks]\nnames = [\"relu\"]\n"
                         "dir = '''\nmy tasks'''  # a multi-line literal string\n\n[grpo]\nsteps = 2\n");
  const auto e = experiment::load_experiment(file);
  const auto expected = (folder / "my tasks").lexically_normal();
  CHECK(std::filesystem::path(e.tasks.dir) == expected);
  CHECK(e.key_lines.at("grpo.steps") == 11);
  // The run's copy of the text: read from anywhere, it names the same folder, and later keys keep their lines.
  const auto copy = experiment::parse_experiment(e.text, "copy.toml");
  CHECK(std::filesystem::path(copy.tasks.dir) == expected);
  CHECK(copy.key_lines.at("grpo.steps") == 11);
  CHECK(copy.grpo.steps == 2);
  // Text parsed without a file keeps today's meaning: relative to the current directory.
  CHECK_THROWS_AS(experiment::parse_experiment(kMinimal + "dir = \"my tasks\"\n", "t.toml"), config::ConfigError);
}

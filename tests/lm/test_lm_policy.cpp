// The language model as a policy, on the tiny fixture model: prompts, parse failures, updates that move the
// log-probabilities the way the advantages say, checkpoints that a second copy restores exactly (AdamW included),
// per-task adapters for test-time training, and settings refused before loading.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <numeric>
#include <thread>

#include "lm/lm_support.h"
#include "policy/kernel_prompt.h"
#include "policy/kernelbench_prompt.h"
#include "lm/policy/lm_policy.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

policy::LmPolicySetup tiny_setup(const fs::path& state, bool per_task = false) {
  policy::LmPolicySetup s;
  s.config.kind = experiment::PolicyKind::libtorch;
  s.config.temperature = 1.0;
  s.config.lm.model = test::lm_fixture("qwen2_tiny").string();
  s.config.lm.max_new_tokens = 12;
  s.config.lm.lora_rank = 4;
  s.config.lm.learning_rate = 2e-2;
  s.state_dir = state;
  s.per_task_adapters = per_task;
  s.seed = 7;
  return s;
}

eval::TaskSpec task(const std::string& name) { return tasks::find_task(name, test::tasks_dir()); }

double total(const std::vector<float>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

std::vector<float> logprobs_of(policy::LmPolicy& p, const eval::TaskSpec& t, const std::vector<int32_t>& tokens) {
  policy::Sample s;
  s.task = t.name;
  s.tokens = tokens;
  return p.completion_logprobs({s}).front();
}

}  // namespace

TEST_CASE("lm policy: samples carry the reply, its tokens and log-probs, replies without code are parse failures") {
  test::ScratchDir dir("lm-policy-sample");
  policy::LmPolicy p(tiny_setup(dir.path()));
  const auto relu = task("relu");
  const std::string prompt = p.prompt_for(relu);
  CHECK(prompt.find("<|im_start|>user") != std::string::npos);  // the fixture tokenizer speaks ChatML
  const auto contract = test::read_file(test::source_dir() / "kernels_eval" / "include" / "crucible" / "kernel.h");
  CHECK(prompt.find(policy::kernel_prompt(relu, eval::CandidateLanguage::cpp(), contract)) != std::string::npos);
  const auto samples = p.sample(relu, 3);
  REQUIRE(samples.size() == 3);
  for (const auto& s : samples) {
    CHECK(s.task == "relu");
    CHECK(s.policy_version == 0);
    CHECK(!s.tokens.empty());
    CHECK(s.tokens.size() <= 12);
    CHECK(s.logprobs.size() == s.tokens.size());
    for (float lp : s.logprobs) CHECK(lp <= 0.0f);
    // A random model writes no code block: the sample says why instead of carrying a source.
    CHECK(s.source.empty());
    CHECK(!s.parse_error.empty());
  }
  CHECK(samples[0].tokens != samples[1].tokens);  // each sample draws its own seed
}

TEST_CASE("lm policy: with KernelBench's prompt, a task's prompt is kernelbench_prompt() around its problem file") {
  test::ScratchDir dir("lm-policy-kernelbench");
  const fs::path fixtures = test::source_dir() / "tests" / "fixtures" / "kernelbench";
  auto setup = tiny_setup(dir.path());
  setup.language = {eval::Backend::cpu, eval::CandidateKind::kernelbench};  // [eval] candidate = "kernelbench"
  setup.config.prompt.kind = policy::PromptKind::kernelbench;
  setup.config.prompt.kernelbench.kernelbench_dir = fixtures / "checkout";
  policy::LmPolicy p(setup);
  const auto kb_relu = tasks::load_task_file(fixtures / "tasks" / "kb_relu.toml");
  const std::string expected = policy::kernelbench_prompt(
      test::read_file(fixtures / "checkout" / "KernelBench" / "level1" / "19_ReLU.py"), setup.config.prompt.kernelbench);
  const std::string prompt = p.prompt_for(kb_relu);
  CHECK(prompt.find("<|im_start|>user\n" + expected) != std::string::npos);  // the user turn, in the chat format
  CHECK(prompt.find("crucible_forward") == std::string::npos);               // not Crucible's contract
  policy::Attempt attempt;
  attempt.previous.source = "class ModelNew: pass\n";
  CHECK(p.refinement_prompt(kb_relu, attempt).find("```python\nclass ModelNew: pass\n") != std::string::npos);
  // A task that names no problem has no KernelBench prompt: the policy says so, naming it.
  CHECK_THROWS_WITH_AS(p.prompt_for(task("layernorm")), doctest::Contains("'layernorm'"), std::invalid_argument);
}

TEST_CASE("lm policy: an update moves log-probs with the advantages and checkpoints into the state directory") {
  test::ScratchDir dir("lm-policy-update");
  policy::LmPolicy p(tiny_setup(dir.path()));
  const auto relu = task("relu");
  auto samples = p.sample(relu, 2);
  const double good_before = total(logprobs_of(p, relu, samples[0].tokens));
  const double bad_before = total(logprobs_of(p, relu, samples[1].tokens));
  CHECK(good_before == doctest::Approx(total(samples[0].logprobs)).epsilon(1e-4));
  for (int step = 0; step < 3; ++step) p.update(samples, {1.0, -1.0});
  CHECK(p.version() == 3);
  CHECK(total(logprobs_of(p, relu, samples[0].tokens)) > good_before + 0.5);
  CHECK(total(logprobs_of(p, relu, samples[1].tokens)) < bad_before - 0.5);

  const auto metrics = p.update_metrics();
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0].sequences == 2);
  CHECK(metrics[0].grad_norm > 0);
  CHECK(metrics[0].tokens == static_cast<int64_t>(samples[0].tokens.size() + samples[1].tokens.size()));
  for (int v = 1; v <= 3; ++v) {
    CHECK(fs::exists(dir.path() / ("v" + std::to_string(v)) / "adapter" / "adapter_config.json"));
    CHECK(fs::exists(dir.path() / ("v" + std::to_string(v)) / "optimizer.pt"));
  }
  const auto snap = nlohmann::json::parse(p.snapshot());
  CHECK(snap["kind"] == "libtorch");
  CHECK(snap["version"] == 3);
  CHECK(snap["adapters"][""] == "v3");
}

TEST_CASE("lm policy: a refinement turn's prompt carries the previous code and its verdict, and training uses it") {
  test::ScratchDir dir("lm-policy-refine");
  policy::LmPolicy p(tiny_setup(dir.path()));
  const auto relu = task("relu");
  policy::Attempt attempt;
  attempt.previous.task = "relu";
  attempt.previous.source = "CRUCIBLE_API int crucible_forward() { return 0; } // PREVIOUS_CODE";
  eval::Verdict v;
  v.status = eval::Status::incorrect;
  v.reasons.push_back({eval::ReasonCode::mismatch, "trial 0: output y differs at 7 elements"});
  attempt.feedback = policy::feedback_of(v);
  const std::string prompt = p.refinement_prompt(relu, attempt);
  CHECK(prompt.find("<|im_start|>user") != std::string::npos);
  CHECK(prompt.find("Task: relu") == p.prompt_for(relu).find("Task: relu"));  // the task's own text first
  CHECK(prompt.find("PREVIOUS_CODE") != std::string::npos);
  CHECK(prompt.find("status: incorrect (mismatch)") != std::string::npos);
  CHECK(prompt.find("output y differs at 7 elements") != std::string::npos);

  const auto refined = p.refine(relu, {attempt, attempt});
  REQUIRE(refined.size() == 2);
  for (const auto& s : refined) {
    CHECK(s.prompt == prompt);
    CHECK(!s.tokens.empty());
    CHECK(s.logprobs.size() == s.tokens.size());
  }
  // Scored after the refinement prompt, the sampler's log-probs are what the trainer sees; after the task's own
  // prompt they are not, so an update must condition on the sample's prompt.
  CHECK(total(p.completion_logprobs({refined[0]}).front()) == doctest::Approx(total(refined[0].logprobs)).epsilon(1e-4));
  auto plain = refined[0];
  plain.prompt.clear();
  CHECK(std::abs(total(p.completion_logprobs({plain}).front()) - total(refined[0].logprobs)) > 1e-3);
  const double before = total(p.completion_logprobs({refined[0]}).front());
  for (int step = 0; step < 3; ++step) p.update({refined[0]}, {1.0});
  CHECK(total(p.completion_logprobs({refined[0]}).front()) > before + 0.5);
}

TEST_CASE("lm policy: under loss = sdpo a sample's teacher reads its context inside the user turn") {
  test::ScratchDir dir("lm-policy-sdpo");
  auto setup = tiny_setup(dir.path());
  setup.config.lm.loss = experiment::Loss::sdpo;
  setup.config.lm.sdpo_weight = 1.0;
  policy::LmPolicy p(setup);
  const auto relu = task("relu");
  auto samples = p.sample(relu, 2);
  REQUIRE(samples.size() == 2);
  samples[0].teacher_context = "TEACHER_CONTEXT: status: correct";
  const std::string teacher = p.teacher_prompt(samples[0]);
  const std::string own = p.prompt_for(relu);
  // The context ends the user turn: the task's text before it, the assistant's turn after it, as in the student's.
  const auto at = teacher.find("TEACHER_CONTEXT");
  REQUIRE(at != std::string::npos);
  CHECK(teacher.find("Task: relu") < at);
  CHECK(teacher.find("<|im_end|>", at) != std::string::npos);
  const std::string turn_end = own.substr(own.rfind("<|im_end|>"));
  CHECK(teacher.substr(teacher.size() - turn_end.size()) == turn_end);
  CHECK(teacher.substr(0, own.size() - turn_end.size()) == own.substr(0, own.size() - turn_end.size()));
  CHECK(teacher.rfind("<|im_start|>assistant") > at);

  p.update(samples, {0.0, 0.0});
  auto m = p.update_metrics();
  REQUIRE(m.size() == 1);
  CHECK(m[0].taught_sequences == 1);  // the sample without a context has no teacher
  CHECK(m[0].distill_kl > 0);
  CHECK(m[0].grad_norm > 0);  // advantages are zero: only the teacher moved the adapter

  // Under grpo_clip the same contexts are ignored.
  test::ScratchDir other("lm-policy-sdpo-off");
  policy::LmPolicy plain(tiny_setup(other.path()));
  plain.prepare(relu);
  plain.update(samples, {0.0, 0.0});
  CHECK(plain.update_metrics()[0].taught_sequences == 0);
}

TEST_CASE("lm policy: a restored copy samples and continues training exactly like the original") {
  test::ScratchDir dir("lm-policy-restore");
  const auto relu = task("relu");
  policy::LmPolicy a(tiny_setup(dir.path()));
  const auto samples = a.sample(relu, 2);
  a.update(samples, {1.0, -1.0});

  policy::LmPolicy b(tiny_setup(dir.path()));
  b.prepare(relu);
  b.restore(a.snapshot());
  CHECK(b.version() == 1);
  CHECK(logprobs_of(b, relu, samples[0].tokens) == logprobs_of(a, relu, samples[0].tokens));

  // The second step needs AdamW's moments from the checkpoint, not a fresh optimizer.
  a.update(samples, {1.0, -1.0});
  b.update(samples, {1.0, -1.0});
  const auto la = logprobs_of(a, relu, samples[1].tokens);
  const auto lb = logprobs_of(b, relu, samples[1].tokens);
  REQUIRE(la.size() == lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) CHECK(lb[i] == doctest::Approx(la[i]).epsilon(1e-5));
  const auto next_a = a.sample(relu, 1), next_b = b.sample(relu, 1);
  CHECK(next_a[0].tokens == next_b[0].tokens);
}

TEST_CASE("lm policy: a policy over another's weights trains and samples on its own, also at the same time") {
  // A run's rollout generator and optimizer: one copy of the weights, each its own adapter, optimizer and caches.
  test::ScratchDir dir("lm-policy-shared"), alone_dir("lm-policy-alone");
  const auto relu = task("relu");
  policy::LmPolicy generator(tiny_setup(dir.path()));
  policy::LmPolicy optimizer(tiny_setup(dir.path()), generator);
  policy::LmPolicy alone(tiny_setup(alone_dir.path()));  // the same model loaded on its own
  const auto samples = alone.sample(relu, 2);
  optimizer.prepare(relu);
  generator.prepare(relu);
  const auto before = logprobs_of(generator, relu, samples[0].tokens);
  CHECK(logprobs_of(optimizer, relu, samples[0].tokens) == before);

  // The optimizer steps while the generator samples on another thread: the generator samples what a policy with
  // weights of its own samples, and the step moves only the optimizer's adapter.
  std::vector<policy::Sample> sampled;
  std::thread sampler([&] { sampled = generator.sample(relu, 2); });
  optimizer.update(samples, {1.0, -1.0});
  sampler.join();
  REQUIRE(sampled.size() == 2);
  CHECK(sampled[0].tokens == samples[0].tokens);
  CHECK(sampled[1].tokens == samples[1].tokens);
  CHECK(logprobs_of(generator, relu, samples[0].tokens) == before);
  CHECK(logprobs_of(optimizer, relu, samples[0].tokens) != before);
  alone.update(samples, {1.0, -1.0});

  // Publishing the step: the generator restores the optimizer's snapshot and then reads as the optimizer does.
  generator.restore(optimizer.snapshot());
  CHECK(logprobs_of(generator, relu, samples[0].tokens) == logprobs_of(optimizer, relu, samples[0].tokens));
  const auto la = logprobs_of(alone, relu, samples[1].tokens), lg = logprobs_of(generator, relu, samples[1].tokens);
  REQUIRE(la.size() == lg.size());
  for (std::size_t i = 0; i < la.size(); ++i) CHECK(lg[i] == doctest::Approx(la[i]).epsilon(1e-5));

  auto other_model = tiny_setup(dir.path());
  other_model.config.lm.model = test::lm_fixture("llama_tiny").string();
  CHECK_THROWS_WITH_AS(policy::LmPolicy(other_model, generator), doctest::Contains("same model"),
                       std::invalid_argument);
}

TEST_CASE("lm policy: malformed snapshots and settings are refused with the reason") {
  test::ScratchDir dir("lm-policy-errors");
  policy::LmPolicy p(tiny_setup(dir.path()));
  CHECK_THROWS_AS(p.restore("{}"), std::invalid_argument);
  CHECK_THROWS_AS(p.restore(R"({"kind": "search", "version": 1, "adapters": {}})"), std::invalid_argument);
  CHECK_THROWS_AS(p.restore(R"({"kind": "libtorch", "version": 1, "adapters": {"": 3}})"), std::invalid_argument);
  CHECK_THROWS(p.restore(R"({"kind": "libtorch", "version": 1, "adapters": {"": "v9"}})"));  // no such checkpoint
  CHECK_THROWS_AS(p.update({policy::Sample{"gelu", "", "", {1, 2}, {-1.f, -1.f}}}, {1.0}), std::invalid_argument);

  auto settings = tiny_setup(dir.path()).config.lm;
  CHECK(!policy::lm_policy_problem(settings, 0));
  settings.lora_targets = {"q_proj", "qkv"};
  auto problem = policy::lm_policy_problem(settings, 0);
  REQUIRE(problem);
  CHECK(problem->first == "lora.targets");
  CHECK(problem->second.find("qkv") != std::string::npos);
  settings = tiny_setup(dir.path()).config.lm;
  settings.model = (dir.path() / "nowhere").string();
  CHECK(policy::lm_policy_problem(settings, 0)->first == "model");
  settings = tiny_setup(dir.path()).config.lm;
  settings.device = eval::Device::cuda(0);
  CHECK(policy::lm_policy_problem(settings, 0)->first == "device");
}

TEST_CASE("lm policy: a configured chat format renders the prompts, one the tokenizer cannot end is refused") {
  test::ScratchDir dir("lm-policy-chat-format");
  auto qwen3 = tiny_setup(dir.path() / "qwen3");
  qwen3.config.lm.chat_format = lm::ChatFormat::qwen3;
  policy::LmPolicy p(qwen3);
  const auto relu = task("relu");
  const std::string prompt = p.prompt_for(relu);
  CHECK(prompt.rfind("<|im_start|>user\n", 0) == 0);  // Qwen3 has no default system prompt, ChatML would add one
  CHECK(prompt.find("You are a helpful assistant.") == std::string::npos);
  CHECK(prompt.size() >= 22);
  CHECK(prompt.compare(prompt.size() - 22, 22, "<|im_start|>assistant\n") == 0);
  for (const auto& s : p.sample(relu, 2)) CHECK(s.source.empty() != s.parse_error.empty());

  auto harmony = tiny_setup(dir.path() / "harmony");
  harmony.config.lm.chat_format = lm::ChatFormat::harmony;
  std::string error;
  try {
    policy::LmPolicy refused(harmony);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  CHECK(error == "chat format harmony: the tokenizer has no <|return|> token");
}

TEST_CASE("lm policy: a harmony model's prompt carries the reasoning effort and its replies are read as harmony") {
  test::ScratchDir dir("lm-policy-harmony");
  auto setup = tiny_setup(dir.path() / "state");
  setup.config.lm.model = test::harmony_tiny_model(dir.path() / "model").string();
  setup.config.lm.reasoning_effort = lm::ReasoningEffort::high;
  setup.config.lm.max_new_tokens = 64;
  policy::LmPolicy p(setup);  // chat_format auto: the tokenizer's markers say harmony
  const auto relu = task("relu");
  const std::string prompt = p.prompt_for(relu);
  CHECK(prompt.rfind("<|start|>system<|message|>", 0) == 0);
  CHECK(prompt.find("\nReasoning: high\n") != std::string::npos);
  const std::string end = "<|end|><|start|>assistant";
  CHECK(prompt.compare(prompt.size() - end.size(), end.size(), end) == 0);
  for (const auto& s : p.sample(relu, 16)) {
    CHECK(s.source.empty() != s.parse_error.empty());
    REQUIRE(!s.tokens.empty());
    for (std::size_t i = 0; i + 1 < s.tokens.size(); ++i) CHECK((s.tokens[i] != 2 && s.tokens[i] != 999));  // stops
    // <|end|> closes an analysis message; only the budget ends a reply whose last token it is.
    if (s.tokens.back() == 997) CHECK(s.tokens.size() == 64u);
    // The random model writes no final message with a code block: the reason is harmony's.
    if (!s.parse_error.empty()) CHECK_MESSAGE(s.parse_error.find("final") != std::string::npos, s.parse_error);
  }
}

TEST_CASE("lm policy: per-task adapters (ttt) fork from the start adapter and adapt independently") {
  test::ScratchDir dir("lm-policy-ttt");
  policy::LmPolicy p(tiny_setup(dir.path(), /*per_task=*/true));
  const auto relu = task("relu"), gelu = task("gelu");
  p.prepare(relu);
  p.prepare(gelu);
  const auto gelu_samples = p.sample(gelu, 1);
  const auto gelu_before = logprobs_of(p, gelu, gelu_samples[0].tokens);
  const auto samples = p.sample(relu, 2);
  p.update(samples, {1.0, -1.0});
  CHECK(logprobs_of(p, gelu, gelu_samples[0].tokens) == gelu_before);  // gelu's adapter did not move
  const auto snap = nlohmann::json::parse(p.snapshot());
  CHECK(snap["adapters"].size() == 1);
  CHECK(snap["adapters"]["relu"] == "v1/tasks/relu");
  REQUIRE(p.update_metrics().size() == 1);
  CHECK(p.update_metrics()[0].adapter == "relu");

  // A copy restored from the snapshot has relu's adapted weights and gelu's start weights.
  policy::LmPolicy copy(tiny_setup(dir.path(), true));
  copy.prepare(relu);
  copy.prepare(gelu);
  copy.restore(p.snapshot());
  CHECK(logprobs_of(copy, relu, samples[0].tokens) == logprobs_of(p, relu, samples[0].tokens));
  CHECK(logprobs_of(copy, gelu, gelu_samples[0].tokens) == gelu_before);
}

#include "openai_policy/openai_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "config/text_file.h"
#include "crucible/eval/evaluator.h"
#include "policy/task_prompt.h"

namespace crucible::policy {
using nlohmann::json;

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_text(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

std::unique_ptr<Policy> make_openai_policy(OpenAiPolicySetup setup) {
  return std::make_unique<OpenAiPolicy>(std::move(setup));
}

namespace {

class LlmJudge : public judge::Judge {
 public:
  explicit LlmJudge(const experiment::JudgeConfig& config) : client_(config.endpoint), temperature_(config.temperature) {}
  judge::JudgeResult judge(const eval::TaskSpec& task, const std::string& source, const eval::Verdict& verdict,
                           uint64_t seed) const override {
    judge::JudgeResult out;
    const auto reply = client_.chat(judge::judge_prompt(task, source, verdict), temperature_, seed);
    if (!reply.ok) {
      out.error = "judge_error: " + reply.error;
      return out;
    }
    std::string why;
    out.score = judge::parse_judge_reply(reply.text, why);
    if (!out.score) out.error = "judge_error: " + why;
    return out;
  }

 private:
  ChatClient client_;
  double temperature_;
};

}  // namespace

std::unique_ptr<judge::Judge> make_llm_judge(const experiment::JudgeConfig& config) {
  return std::make_unique<LlmJudge>(config);
}

OpenAiPolicy::OpenAiPolicy(OpenAiPolicySetup setup)
    : setup_(std::move(setup)),
      client_(setup_.config.openai),
      prompter_(setup_.config.prompt, setup_.language,
                config::read_text_file(eval::default_include_dir() / "crucible" / "kernel.h")) {}

Sample OpenAiPolicy::complete_one(const eval::TaskSpec& task, const std::string& prompt, uint64_t seed) const {
  Sample s;
  s.task = task.name;
  s.policy_version = version_;
  auto reply = client_.chat(prompt, setup_.config.temperature, seed);
  if (!reply.ok) {
    s.policy_error = true;
    s.parse_error = reply.error;
    return s;
  }
  if (auto code = prompter_.code(reply.text)) s.source = std::move(*code);
  else
    s.parse_error = reply.finish_reason == "length" ? "the reply was cut off at max_tokens = " +
                                                          std::to_string(client_.config().max_tokens) +
                                                          " before a complete code block"
                                                    : "the reply has no complete fenced code block";
  s.output = std::move(reply.text);
  s.logprobs = std::move(reply.logprobs);
  return s;
}

std::vector<Sample> OpenAiPolicy::complete(const eval::TaskSpec& task, const std::vector<std::string>& prompts) {
  std::vector<Sample> out(prompts.size());
  std::vector<uint64_t> seeds;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    seeds.push_back(splitmix(setup_.seed ^ splitmix(version_ ^ splitmix(hash_text(task.name) ^ splitmix(draws_++)))));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < prompts.size();) out[i] = complete_one(task, prompts[i], seeds[i]);
  };
  const std::size_t threads = std::min<std::size_t>(prompts.size(), static_cast<std::size_t>(setup_.config.openai.concurrency));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

std::vector<Sample> OpenAiPolicy::sample(const eval::TaskSpec& task, int n) {
  const std::string prompt = prompter_.prompt(task);
  return complete(task, std::vector<std::string>(static_cast<std::size_t>(std::max(0, n)), prompt));
}

std::vector<Sample> OpenAiPolicy::refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) {
  std::vector<std::string> prompts;
  for (const auto& a : attempts) prompts.push_back(prompter_.refinement(task, a));
  return complete(task, prompts);
}

void OpenAiPolicy::update(const std::vector<Sample>& samples, const std::vector<double>& advantages) {
  if (samples.size() != advantages.size()) throw std::invalid_argument("update: one advantage per sample");
  ++version_;  // the served weights stay as they are
}

std::string OpenAiPolicy::snapshot() const { return json{{"kind", "openai"}, {"version", version_}}.dump(); }

void OpenAiPolicy::restore(const std::string& snapshot) {
  const json j = json::parse(snapshot, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "openai" || !j.contains("version") ||
      !j["version"].is_number_unsigned())
    throw std::invalid_argument("not an openai policy snapshot: " + snapshot.substr(0, 200));
  version_ = j["version"].get<uint64_t>();
}

}  // namespace crucible::policy

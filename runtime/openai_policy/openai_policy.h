#pragma once
// A served model as the policy (`[policy] kind = "openai"`): chat completions from any OpenAI-compatible server
// (vLLM, SGLang, `crucible serve`), prompts built as for the in-process model, kernels parsed from the replies. A
// request that fails after its retries (server down, timeout, an error answer) gives that sample a recorded
// `policy_error` and the run goes on; the next request tries again, so the run recovers when the server does. The
// served weights are not trained from here: update() only counts versions.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "crucible/eval/candidate_language.h"
#include "experiment/experiment.h"
#include "judge/judge_reply.h"
#include "openai_policy/chat_client.h"
#include "policy/policy.h"
#include "policy/task_prompt.h"

namespace crucible::policy {

struct OpenAiPolicySetup {
  experiment::PolicyConfig config;  // temperature and the [policy] openai keys
  eval::CandidateLanguage language;  // which kernels to ask for (C++ by default)
  uint64_t seed = 1;
};

// The policy, or std::invalid_argument with the reason (a build without cpp-httplib, a missing API key).
std::unique_ptr<Policy> make_openai_policy(OpenAiPolicySetup setup);

// A judge model served over an OpenAI-compatible API ([judge]), or std::invalid_argument with the reason.
std::unique_ptr<judge::Judge> make_llm_judge(const experiment::JudgeConfig& config);

class OpenAiPolicy : public Policy {
 public:
  // Reads the API key (environment variable or file); throws std::invalid_argument naming what is missing, or a
  // prompt that does not fit the candidates' kind.
  explicit OpenAiPolicy(OpenAiPolicySetup setup);

  std::vector<Sample> sample(const eval::TaskSpec& task, int n) override;
  std::vector<Sample> refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) override;
  void prepare(const eval::TaskSpec&) override {}
  void update(const std::vector<Sample>& samples, const std::vector<double>& advantages) override;
  uint64_t version() const override { return version_; }
  std::string snapshot() const override;
  void restore(const std::string& snapshot) override;

 private:
  // One chat completion per user prompt, `concurrency` at a time.
  std::vector<Sample> complete(const eval::TaskSpec& task, const std::vector<std::string>& prompts);
  Sample complete_one(const eval::TaskSpec& task, const std::string& prompt, uint64_t seed) const;

  OpenAiPolicySetup setup_;
  ChatClient client_;
  TaskPrompter prompter_;  // Crucible's prompt or KernelBench's ([policy] prompt)
  uint64_t version_ = 0;
  uint64_t draws_ = 0;
};

}  // namespace crucible::policy

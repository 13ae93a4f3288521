#pragma once
// A language model as the policy (`[policy] kind = "libtorch"`): prompts built from the task, kernels parsed from the
// replies, LoRA trained on the samples' advantages. Every update is checkpointed under a state directory (the run's),
// and the snapshot names those checkpoints, so publishing a version to the rollout generator and resuming a run are
// the same operation: load the checkpoint a snapshot names.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/candidate_language.h"
#include "experiment/experiment.h"
#include "policy/policy.h"

namespace crucible::policy {

struct LmPolicySetup {
  experiment::PolicyConfig config;      // kind, temperature and the libtorch settings
  eval::CandidateLanguage language;     // which kernels to ask for (C++ by default)
  std::filesystem::path state_dir;      // where updates are checkpointed: <state_dir>/v<version>/...
  bool per_task_adapters = false;       // ttt: each task forks its own adapter (and optimizer) from the start
  uint64_t seed = 1;
  std::optional<uint64_t> random_weights;  // benchmarks: the model's weights drawn at its shapes (LoadOptions)
};

// The first problem with the settings that shows without loading the model, as (key under [policy], message): a
// missing model or adapter directory, an unknown LoRA target, a GPU this machine does not have.
std::optional<std::pair<std::string, std::string>> lm_policy_problem(const experiment::LmPolicyConfig& config,
                                                                      int cuda_devices);

// Gives back to the driver the device memory LibTorch caches for this process's models but no tensor uses (before
// an evaluator on the same GPU runs candidates, whose workers are other processes). Nothing on the CPU.
void release_cached_device_memory(const eval::Device& device);

class LmPolicy : public Policy {
 public:
  // Loads the model (and the start adapter); throws lm::ModelFormatError or std::invalid_argument with the reason.
  explicit LmPolicy(LmPolicySetup setup);
  // The same model over `weights_of`'s weights in memory (a run's rollout generator and optimizer: gpt-oss-120b's
  // 61 GiB once), with adapters, optimizer and caches of its own. Throws std::invalid_argument unless both name the
  // same model, device and dtype.
  LmPolicy(LmPolicySetup setup, const LmPolicy& weights_of);
  ~LmPolicy() override;

  std::vector<Sample> sample(const eval::TaskSpec& task, int n) override;
  // Groups that share an adapter are decoded as one batch.
  std::vector<std::vector<Sample>> sample_groups(const std::vector<GroupAsk>& asks) override;
  // One reply per attempt, to the task's prompt followed by the attempt's code and the evaluator's feedback
  // (refinement_prompt); each sample keeps that prompt, which its update conditions on.
  std::vector<Sample> refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) override;
  void prepare(const eval::TaskSpec& task) override;
  // One optimizer step per adapter the samples touch; samples without tokens are skipped. Checkpoints every adapter
  // it stepped to <state_dir>/v<version>/.
  void update(const std::vector<Sample>& samples, const std::vector<double>& advantages) override;
  uint64_t version() const override { return version_; }
  // JSON: {"kind": "libtorch", "version": N, "adapters": {"<task or empty>": "v<k>/..."}}, paths relative to
  // the state directory.
  std::string snapshot() const override;
  void restore(const std::string& snapshot) override;

  // The last update's loss, KL, entropy, clip fraction, gradient norm and token counts: one object, or
  // {"adapters": [...]} when it stepped several.
  std::vector<UpdateMetrics> update_metrics() const override { return last_update_; }
  // The prompt (rendered, as the model sees it) for a task.
  std::string prompt_for(const eval::TaskSpec& task);
  // The user turn of a refinement: the task's own text, then the previous code (cut to 16 KB) and the feedback text.
  std::string refinement_prompt(const eval::TaskSpec& task, const Attempt& attempt);
  // What a sample's self-distillation teacher reads (loss = "sdpo"): the sample's prompt with its teacher context
  // at the end of the user turn. The sample's task must have been prepared or sampled.
  std::string teacher_prompt(const Sample& sample);
  // Teacher-forced log-probabilities of the samples' tokens after their task's prompt, under the current adapters
  // (the trainer's view of what the sampler reported). Every task must have been prepared or sampled.
  std::vector<std::vector<float>> completion_logprobs(const std::vector<Sample>& samples);

 private:
  LmPolicy(LmPolicySetup setup, const LmPolicy* weights_of);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t version_ = 0;
  std::vector<UpdateMetrics> last_update_;
};

}  // namespace crucible::policy

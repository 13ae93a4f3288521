#pragma once
// Supervised LoRA training on (prompt, completion) pairs, e.g. the best kernels a sweep found: the warm start
// before reinforcement learning. Plain types; the work happens in LoraTrainer.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lm/model/language_model.h"
#include "lm/model/lora_config.h"

namespace crucible::lm {

struct SftExample {
  std::string prompt, completion;
};

// One JSON object per line with string fields "prompt" and "completion"; errors name the file and line.
std::vector<SftExample> read_sft_jsonl(const std::filesystem::path& path);

struct SftOptions {
  LoraConfig lora;
  int64_t steps = 100;
  int64_t batch_size = 8;
  int64_t micro_batch = 8;
  double learning_rate = 1e-4;
  double eval_fraction = 0.1;  // held out (at least one example when there are two or more)
  int64_t eval_every = 10;
  bool chat = false;           // wrap each prompt as a user turn in the model's chat format
  std::string system_prompt;
  uint64_t seed = 0;
};

struct SftProgress {
  int64_t step = 0;
  double train_loss = 0;
  double eval_nll = 0;  // per completion token; NaN when not evaluated this step
};

struct SftReport {
  int64_t train_examples = 0, eval_examples = 0;
  double eval_nll_before = 0, eval_nll_after = 0;
  std::vector<SftProgress> steps;
};

// Trains a fresh adapter on `model` (left in place: model.adapter()); throws std::invalid_argument for no data.
SftReport run_sft(LanguageModel& model, const std::vector<SftExample>& examples, const SftOptions& options,
                  const std::function<void(const SftProgress&)>& on_step = {});

}  // namespace crucible::lm

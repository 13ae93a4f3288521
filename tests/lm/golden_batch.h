#pragma once
// A small training batch made of a fixture's golden outputs, for the suites that take trainer steps and compare them.
#include "lm/golden_outputs.h"
#include "lm/training/policy_loss.h"

namespace crucible::test {

// Three copies of the second golden prompt followed by six tokens of its greedy continuation, with advantages
// -0.5, 1 and -0.5: enough for a policy step to move every adapted weight.
inline lm::SequenceBatch golden_batch(const GoldenOutputs& g) {
  lm::SequenceBatch batch;
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> seq = g.prompts[1];
    seq.insert(seq.end(), g.greedy[1].begin(), g.greedy[1].begin() + 6);
    batch.sequences.push_back(seq);
    batch.prompt_lengths.push_back(g.prompts[1].size());
    batch.advantages.push_back(i == 1 ? 1.0f : -0.5f);
  }
  return batch;
}

}  // namespace crucible::test

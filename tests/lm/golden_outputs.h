#pragma once
// transformers' outputs for a fixture (expected.safetensors): prompts, float32 logits, greedy continuations.
// Includes torch: only for the suites that compare tensors.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lm/lm_support.h"
#include "lm/format/safetensors.h"
#include "lm/model/torch_tensors.h"

namespace crucible::test {

struct GoldenOutputs {
  std::vector<std::vector<int64_t>> prompts, greedy;
  std::vector<at::Tensor> logits;  // [T, V] float32
};

inline GoldenOutputs golden(const std::string& fixture) {
  const auto ids = read_golden_ids(fixture);
  const auto file = lm::SafetensorsFile::open(lm_fixture(fixture) / "expected.safetensors");
  GoldenOutputs g;
  for (int i = 0; file->find("prompt_" + std::to_string(i)); ++i) {
    g.prompts.push_back(ids.at("prompt_" + std::to_string(i)));
    g.greedy.push_back(ids.at("greedy_" + std::to_string(i)));
    g.logits.push_back(lm::view_to_tensor(*file->find("logits_" + std::to_string(i))).clone());
  }
  return g;
}

}  // namespace crucible::test

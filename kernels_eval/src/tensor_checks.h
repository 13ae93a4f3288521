#pragma once
// Tensor chores of the evaluator, in trusted code: drawing inputs, moving them in and out of the
// arena, poisoning outputs and comparing against references.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "crucible/eval/task_spec.h"
#include "crucible/eval/worker_process.h"

namespace crucible::eval {

torch::ScalarType to_torch(DType t);

std::vector<torch::Tensor> draw_inputs(const TaskSpec& task, const Sizes& sizes, uint64_t seed);

void write_tensor(std::byte* arena, const ArenaTensor& slot, const torch::Tensor& value);
torch::Tensor view_tensor(std::byte* arena, const ArenaTensor& slot);  // no copy
bool same_bytes(std::byte* arena, const ArenaTensor& slot, const torch::Tensor& expected);

// Two distinct NaN-payload (or sentinel) patterns, so unwritten elements fail and differ between runs.
void poison(std::byte* arena, const ArenaTensor& slot, int pattern);
int64_t count_poisoned(std::byte* arena, const ArenaTensor& slot, int pattern);

struct Comparison {
  bool passed = true;
  double max_abs = 0.0;
  double max_rel = 0.0;
  int64_t mismatched = 0;
  int64_t nan_mismatched = 0;  // NaN where the reference has a number
  int64_t elements = 0;
};
Comparison compare(const torch::Tensor& out, const torch::Tensor& ref, Tolerance tol);

// Rotates the flattened contents by a random number of elements: same values, new positions, so a
// cache keyed on contents or sampled elements misses while the data distribution stays the same.
void rotate_contents(std::byte* data, std::size_t elements, std::size_t element_size, std::size_t shift);

}  // namespace crucible::eval

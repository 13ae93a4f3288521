#pragma once
// Tensor chores of the evaluator, in trusted code: drawing inputs, moving them in and out of the
// arena, poisoning outputs and comparing against references.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "crucible/eval/task_spec.h"
#include "worker_process.h"
#include "cuda/device_checks.h"

namespace crucible::eval {

torch::ScalarType to_torch(DType t);
// A tensor's description for messages, in the task files' terms: "[4, 8] float32".
std::string shape_text(const std::vector<int64_t>& shape);
std::string tensor_text(const torch::Tensor& t);

// Where a layout's offsets point: the shared host arena, or device memory on a CUDA device.
struct ArenaRef {
  std::byte* base = nullptr;
  int cuda_device = -1;
  bool on_gpu() const { return cuda_device >= 0; }
  torch::Device device() const { return on_gpu() ? torch::Device(torch::kCUDA, cuda_device) : torch::Device(torch::kCPU); }
};

// Drawing millions of values per trial is slow, so each input is drawn once into a pool of twice its
// size; a trial's input is a window of that pool at a random offset (fresh contents, same distribution),
// times the trial's scale factor when the input declares one.
// On a GPU the pools, masks and every tensor made from them live on that device.
// The memory an InputPool holds for one input of this many elements: twice the input, and a mask byte per
// pool element.
inline std::size_t pool_bytes(int64_t elements, DType dtype) {
  return 2 * static_cast<std::size_t>(elements) * (dtype_size(dtype) + 1);
}

class InputPool {
 public:
  InputPool(const TaskSpec& task, const Sizes& sizes, uint64_t seed, torch::Device device = torch::kCPU);
  std::vector<torch::Tensor> draw(uint64_t seed) const;  // contiguous; may alias the pool: do not modify
  // A window with elements reflected around the distribution's centre where a window of a random mask (at
  // its own random offset) says so: the same distribution (normal, uniform and randint are symmetric), but
  // contents no earlier call has seen, and far too many combinations to reassemble. Used for timed calls.
  // A new tensor, made in one vectorised pass.
  torch::Tensor fresh(std::size_t input, uint64_t seed) const;
  // Twice the centre of the input's distribution when changing elements in place by reflection about it keeps
  // the distribution (normal, uniform, randint and two-valued choices, with no scale range and no transform);
  // nothing otherwise.
  std::optional<double> reflection_center2(std::size_t input) const;
  // Whether `t` is a window of this input's pool (as draw() returns), which must not be changed.
  bool shares_memory(std::size_t input, const torch::Tensor& t) const;

 private:
  std::vector<InitSpec> inits_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<torch::Tensor> pools_;  // flat, 2 x numel
  std::vector<torch::Tensor> masks_;  // uint8 0/1 per element, 2 x numel: which elements fresh() reflects
};

void write_tensor(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value);
torch::Tensor view_tensor(ArenaRef arena, const ArenaTensor& slot);  // no copy
bool same_bytes(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& expected);

// An input written into the arena to be checked unchanged after calls. On a GPU the copy also takes the bytes' keyed
// fingerprint (cuda::fingerprint; `key` is the evaluation's secret), and the check reads the arena once instead of
// the arena and the value; on the CPU the check compares bytes with the value.
using WrittenInput = cuda::Fingerprint;  // empty on the CPU
WrittenInput write_input(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value, uint64_t key);
bool input_intact(ArenaRef arena, const ArenaTensor& slot, const torch::Tensor& value, const WrittenInput& written,
                  uint64_t key);
// On a GPU, against the fingerprint alone (an input changed since by reflect_sampled, which kept it up to date).
bool input_intact(ArenaRef arena, const ArenaTensor& slot, const WrittenInput& written, uint64_t key);

// Two distinct NaN-payload (or sentinel) patterns, so unwritten elements fail and differ between runs.
void poison(ArenaRef arena, const ArenaTensor& slot, int pattern);
int64_t count_poisoned(ArenaRef arena, const ArenaTensor& slot, int pattern);

// The sampled checks of timed calls on large device tensors (see cuda/device_checks.h): one element in `block`, as
// one 128-byte run per span of `block` runs chosen by `seed`, is poisoned and then counted; or, for an input,
// reflected about its distribution's centre in the arena, its fingerprint in `written` following the change (the
// evaluator keeps no copy of inputs of GB).
void poison_sampled(ArenaRef arena, const ArenaTensor& slot, int pattern, uint64_t seed, int64_t block);
int64_t count_poisoned_sampled(ArenaRef arena, const ArenaTensor& slot, int pattern, uint64_t seed, int64_t block);
void reflect_sampled(ArenaRef arena, const ArenaTensor& slot, double twice_center, uint64_t seed, int64_t block,
                     uint64_t key, WrittenInput& written);

// The guard band after an output: filled with a canary, and checked intact after calls.
void fill_guard(ArenaRef arena, const ArenaTensor& slot);
bool guard_intact(ArenaRef arena, const ArenaTensor& slot);

struct Comparison {
  bool passed = true;
  double max_abs = 0.0;
  double max_rel = 0.0;
  int64_t mismatched = 0;
  int64_t nan_mismatched = 0;  // NaN where the reference has a number
  int64_t elements = 0;
};
Comparison compare(const torch::Tensor& out, const torch::Tensor& ref, Tolerance tol);
// Largest |value| of a floating tensor (0 for other dtypes).
double max_abs(const torch::Tensor& t);

}  // namespace crucible::eval

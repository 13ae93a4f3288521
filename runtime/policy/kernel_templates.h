#pragma once
// Parameterised kernel templates for the embedded search policy: each family names its knobs (each a short list of
// choices) and renders a candidate's source from one choice per knob. Every combination of choices renders a
// correct candidate for any shape the task allows; the knobs differ only in speed.
//
// Families (runtime/policy/templates/): elementwise (relu, gelu), row reductions (softmax, log_softmax, layernorm,
// rmsnorm, sum_dim, mse_loss on CPU; softmax, rmsnorm on CUDA) and matmul, each for the "cpu" backend (C++) and the
// "cuda" backend (a .cu for nvcc); and for the "triton" backend (Python), elementwise (relu, gelu) and row reductions
// (softmax, log_softmax).
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"

namespace crucible::policy {

struct Knob {
  std::string name;
  std::vector<int> choices;
};

struct KernelTemplate {
  std::string name;
  std::vector<Knob> knobs;
  // `values` holds one chosen value (not index) per knob, in knob order.
  std::string (*render)(const eval::TaskSpec& task, const std::vector<int>& values);
};

// The template for a task (matched by its reference) on a backend ("cpu", "cuda" or "triton"), or null when none
// covers it.
const KernelTemplate* template_for(const eval::TaskSpec& task, const std::string& backend);

// The references (the shipped tasks' names) a backend has templates for, sorted.
std::vector<std::string> covered_tasks(const std::string& backend);

}  // namespace crucible::policy

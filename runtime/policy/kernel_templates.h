#pragma once
// Parameterised kernel templates for the embedded search policy: each family names its knobs (each a short list of
// choices) and renders a candidate's source from one choice per knob. Every combination of choices renders a
// correct candidate for any shape the task allows; the knobs differ only in speed.
//
// Families (runtime/policy/templates/): elementwise (relu, gelu), row reductions (softmax, log_softmax, layernorm,
// rmsnorm, sum_dim, mse_loss on CPU; softmax, rmsnorm on CUDA) and matmul, each in C++ (the CPU) and CUDA C++ (a .cu
// for nvcc); and in Triton (Python), elementwise (relu, gelu) and row reductions (softmax, log_softmax). KernelBench
// candidates have no templates.
#include <string>
#include <vector>

#include "crucible/eval/candidate_language.h"
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

// The languages that have templates: C++, CUDA C++ and Triton.
std::vector<eval::CandidateLanguage> template_languages();

// The template for a task (matched by its reference) in a language, or null when none covers it.
const KernelTemplate* template_for(const eval::TaskSpec& task, eval::CandidateLanguage language);

// The references (the shipped tasks' names) a language has templates for, sorted; empty for one without templates.
std::vector<std::string> covered_tasks(eval::CandidateLanguage language);

}  // namespace crucible::policy

#pragma once
// Parameterised CPU kernel templates for the embedded search policy: each family names its knobs (each a short
// list of choices) and renders a candidate's source from one choice per knob.
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

// The template for a task, or null when no template covers it (relu, gelu and matmul so far).
const KernelTemplate* template_for(const eval::TaskSpec& task);

}  // namespace crucible::policy

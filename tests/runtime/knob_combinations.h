#pragma once
// Knob-value combinations of a kernel template for the template tests (CPU and GPU suites).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "policy/kernel_templates.h"

namespace crucible::test {

// Knob values covering every choice of every knob: all first choices, all last, and diagonals (the d-th row takes
// choice (d + k) mod size of knob k), without duplicates.
inline std::vector<std::vector<int>> spanning_combinations(const policy::KernelTemplate& t) {
  std::vector<std::vector<int>> combos;
  auto add = [&](std::vector<int> v) {
    if (std::find(combos.begin(), combos.end(), v) == combos.end()) combos.push_back(std::move(v));
  };
  std::vector<int> first, last;
  std::size_t widest = 0;
  for (const auto& k : t.knobs) {
    first.push_back(k.choices.front());
    last.push_back(k.choices.back());
    widest = std::max(widest, k.choices.size());
  }
  add(first);
  add(last);
  for (std::size_t d = 0; d < widest; ++d) {
    std::vector<int> v;
    for (std::size_t k = 0; k < t.knobs.size(); ++k) v.push_back(t.knobs[k].choices[(d + k) % t.knobs[k].choices.size()]);
    add(v);
  }
  return combos;
}

// Every combination of knob values (the full product), for a sweep on request.
inline std::vector<std::vector<int>> all_combinations(const policy::KernelTemplate& t) {
  std::vector<std::vector<int>> combos{{}};
  for (const auto& knob : t.knobs) {
    std::vector<std::vector<int>> longer;
    for (const auto& prefix : combos)
      for (int value : knob.choices) {
        longer.push_back(prefix);
        longer.back().push_back(value);
      }
    combos = std::move(longer);
  }
  return combos;
}

// CRUCIBLE_ALL_KNOB_COMBINATIONS=1 widens the knob sweeps below from spanning_combinations to all of them.
inline bool sweep_all() {
  const char* v = std::getenv("CRUCIBLE_ALL_KNOB_COMBINATIONS");
  return v && std::string(v) == "1";
}

inline std::string describe(const policy::KernelTemplate& t, const std::vector<int>& values) {
  std::string s = t.name + ":";
  for (std::size_t k = 0; k < values.size(); ++k) s += " " + t.knobs[k].name + "=" + std::to_string(values[k]);
  return s;
}

}  // namespace crucible::test

#pragma once
// Turning a verdict into a scalar reward. Plain functions over the evaluator's verdict; no actors here.
#include <string>

#include "crucible/eval/verdict.h"

namespace crucible::rewards {

enum class RewardKind {
  // A verdict with `timing_noisy` counts as no faster than the reference in every kind.
  speedup,          // reference / candidate time when correct, else 0
  composite,        // alpha * compiled + beta * correct + gamma * min(speedup, r_max)
  inverse_runtime,  // scale / candidate median in microseconds when correct, else 0 (TTT-Discover's kernel reward)
};

struct RewardSpec {
  RewardKind kind = RewardKind::speedup;
  double alpha = 0.1, beta = 0.3, gamma = 1.0, r_max = 10.0;  // composite
  double scale = 1000.0;                                      // inverse_runtime
  // Profiling (KernelGYM): the share of GPU time in the candidate's own kernels (kernel_coverage, measured by the
  // CUDA worker) adds coverage_weight * coverage to a correct sample's reward; a correct sample whose measured coverage
  // is below min_coverage is rejected (no gradient). Unmeasured coverage (the CPU) adds nothing and rejects nothing.
  double coverage_weight = 0.0;
  double min_coverage = 0.0;
};

RewardKind parse_reward_kind(const std::string& name);  // throws std::invalid_argument naming the choices
std::string reward_kind_name(RewardKind kind);

double reward(const eval::Verdict& verdict, const RewardSpec& spec);

// Whether a sample is rejected for too little of its time in its own kernels (min_coverage).
bool rejected_for_coverage(const eval::Verdict& verdict, const RewardSpec& spec);

}  // namespace crucible::rewards

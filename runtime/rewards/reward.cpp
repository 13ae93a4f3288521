#include "rewards/reward.h"

#include <algorithm>
#include <stdexcept>

namespace crucible::rewards {

RewardKind parse_reward_kind(const std::string& name) {
  if (name == "speedup") return RewardKind::speedup;
  if (name == "composite") return RewardKind::composite;
  if (name == "inverse_runtime") return RewardKind::inverse_runtime;
  throw std::invalid_argument("unknown reward kind '" + name + "' (expected speedup, composite or inverse_runtime)");
}

std::string reward_kind_name(RewardKind kind) {
  switch (kind) {
    case RewardKind::speedup: return "speedup";
    case RewardKind::composite: return "composite";
    case RewardKind::inverse_runtime: return "inverse_runtime";
  }
  return "?";
}

namespace {

bool timing_noisy(const eval::Verdict& v) {
  return v.has_reason(eval::ReasonCode::timing_noisy);
}

// The kind's reward, before profiling terms.
double base_reward(const eval::Verdict& v, const RewardSpec& spec) {
  const bool correct = v.status == eval::Status::correct;
  // A speedup the evaluator could not pin down counts at most as parity: a noisy measurement is never a gain, and
  // a candidate cannot make itself noisy to escape a slow one.
  const bool noisy = timing_noisy(v);
  const double speedup = correct && v.speedup ? (noisy ? std::min(*v.speedup, 1.0) : *v.speedup) : 0.0;
  switch (spec.kind) {
    case RewardKind::speedup: return speedup;
    case RewardKind::composite: {
      const bool compiled = v.status != eval::Status::compile_error && v.status != eval::Status::parse_error;
      return spec.alpha * (compiled ? 1.0 : 0.0) + spec.beta * (correct ? 1.0 : 0.0) +
             spec.gamma * std::min(speedup, spec.r_max);
    }
    case RewardKind::inverse_runtime: {
      double us = correct && v.candidate_time ? v.candidate_time->median_us : 0.0;
      if (noisy && v.reference_time) us = std::max(us, v.reference_time->median_us);
      return us > 0.0 ? spec.scale / us : 0.0;
    }
  }
  return 0.0;
}

}  // namespace

double reward(const eval::Verdict& v, const RewardSpec& spec) {
  const bool correct = v.status == eval::Status::correct;
  const double coverage = correct && v.kernel_coverage ? spec.coverage_weight * *v.kernel_coverage : 0.0;
  return base_reward(v, spec) + coverage;
}

bool rejected_for_coverage(const eval::Verdict& v, const RewardSpec& spec) {
  return v.status == eval::Status::correct && v.kernel_coverage && *v.kernel_coverage < spec.min_coverage;
}

}  // namespace crucible::rewards

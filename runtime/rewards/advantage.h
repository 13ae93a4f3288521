#pragma once
// Group-relative advantages: the rewards of one group (samples of one task under one policy version) in, one
// advantage per sample out. Plain functions; the reward normalizer actor applies them per group.
#include <string>
#include <vector>

namespace crucible::rewards {

enum class AdvantageKind {
  grpo,                    // (r - mean) / (std + eps)
  dr_grpo,                 // r - mean (no division by the standard deviation)
  rloo,                    // r - mean of the others (leave-one-out)
  entropic,                // w - 1, w = exp(beta r) / mean exp(beta r), fixed beta (TTT-Discover)
  entropic_adaptive_beta,  // the same with beta chosen per group so that KL(softmax(beta r) || uniform) = gamma
};

struct AdvantageSpec {
  AdvantageKind kind = AdvantageKind::grpo;
  double epsilon = 1e-6;          // grpo
  double beta = 1.0;              // entropic
  double kl_target = 0.693147;    // entropic_adaptive_beta: gamma, ln 2 by default
  bool drop_constant_groups = false;  // a group whose rewards are all equal gets no advantages at all
};

AdvantageKind parse_advantage_kind(const std::string& name);  // throws std::invalid_argument naming the choices
std::string advantage_kind_name(AdvantageKind kind);

// Empty when the group is dropped (constant rewards with drop_constant_groups); else one value per reward.
std::vector<double> advantages(const std::vector<double>& rewards, const AdvantageSpec& spec);

// The beta for which softmax(beta * rewards) is gamma nats away from uniform (bisection; 0 for constant rewards).
double adaptive_beta(const std::vector<double>& rewards, double kl_target);

// A per-task running baseline (exponential moving average of mean reward) to normalise rewards across tasks of
// different difficulty before they are grouped.
class RunningBaseline {
 public:
  explicit RunningBaseline(double decay = 0.9) : decay_(decay) {}
  // Returns the reward minus the baseline before this update, then folds the reward in.
  double center(double reward);
  double value() const { return value_; }
  bool empty() const { return count_ == 0; }

 private:
  double decay_;
  double value_ = 0.0;
  long count_ = 0;
};

}  // namespace crucible::rewards

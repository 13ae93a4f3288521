#pragma once
// Group-relative advantages: the rewards of one group (samples of one task under one policy version) in, one
// advantage per sample out. Plain functions; the reward normalizer actor applies them per group.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace crucible::rewards {

enum class AdvantageKind {
  grpo,                    // (r - mean) / (std + eps)
  dr_grpo,                 // r - mean (no division by the standard deviation)
  rloo,                    // r - mean of the others (leave-one-out)
  entropic,                // w - 1, w = exp(beta r) / mean exp(beta r), fixed beta (TTT-Discover)
  entropic_adaptive_beta,  // the same with beta chosen per group so that KL(softmax(beta r) || uniform) = gamma
  trloo,                   // multi-turn (Dr. Kernel): rloo over the group's trajectories at each turn separately
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

// Multi-turn trajectories: what a turn's sample is credited with.
enum class TurnReturns {
  per_turn,    // its own turn's reward
  discounted,  // its reward plus gamma times the next turn's return (Kevin: gamma = 0.4)
};
TurnReturns parse_turn_returns(const std::string& name);  // throws std::invalid_argument naming the choices
std::string turn_returns_name(TurnReturns returns);

struct MultiTurnSpec {
  uint32_t turns = 1;
  TurnReturns returns = TurnReturns::per_turn;
  double gamma = 0.4;
};

// Values laid out turn by turn: turn 0 of every trajectory, then turn 1 of every trajectory, ... (`turns` slices
// of equal size; throws std::invalid_argument otherwise).
std::vector<double> turn_returns(const std::vector<double>& rewards, const MultiTurnSpec& spec);
// Advantages of such a group: each turn's slice on its own (every estimator compares a sample with the other
// trajectories at the same turn; trloo is rloo per turn). A slice the estimator drops (constant, with
// drop_constant_groups) gets 0. With one turn this is advantages().
std::vector<double> turn_advantages(const std::vector<double>& returns, uint32_t turns, const AdvantageSpec& spec);
// Per trajectory, the index (into the turn-major layout) of its best value; ties go to the earliest turn.
std::vector<std::size_t> best_turns(const std::vector<double>& values, uint32_t turns);

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

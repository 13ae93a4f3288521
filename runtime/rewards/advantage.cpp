#include "rewards/advantage.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace crucible::rewards {

AdvantageKind parse_advantage_kind(const std::string& name) {
  if (name == "grpo") return AdvantageKind::grpo;
  if (name == "dr_grpo") return AdvantageKind::dr_grpo;
  if (name == "rloo") return AdvantageKind::rloo;
  if (name == "entropic") return AdvantageKind::entropic;
  if (name == "entropic_adaptive_beta") return AdvantageKind::entropic_adaptive_beta;
  if (name == "trloo") return AdvantageKind::trloo;
  throw std::invalid_argument("unknown advantage kind '" + name +
                              "' (expected grpo, dr_grpo, rloo, entropic, entropic_adaptive_beta or trloo)");
}

std::string advantage_kind_name(AdvantageKind kind) {
  switch (kind) {
    case AdvantageKind::grpo: return "grpo";
    case AdvantageKind::dr_grpo: return "dr_grpo";
    case AdvantageKind::rloo: return "rloo";
    case AdvantageKind::entropic: return "entropic";
    case AdvantageKind::entropic_adaptive_beta: return "entropic_adaptive_beta";
    case AdvantageKind::trloo: return "trloo";
  }
  return "?";
}

TurnReturns parse_turn_returns(const std::string& name) {
  if (name == "per_turn") return TurnReturns::per_turn;
  if (name == "discounted") return TurnReturns::discounted;
  throw std::invalid_argument("unknown returns '" + name + "' (expected per_turn or discounted)");
}

std::string turn_returns_name(TurnReturns returns) {
  return returns == TurnReturns::per_turn ? "per_turn" : "discounted";
}

namespace {
std::size_t trajectories_of(std::size_t values, uint32_t turns) {
  if (turns == 0 || values % turns != 0)
    throw std::invalid_argument(std::to_string(values) + " values are not " + std::to_string(turns) +
                                " turns of equal size");
  return values / turns;
}
}  // namespace

std::vector<double> turn_returns(const std::vector<double>& rewards, const MultiTurnSpec& spec) {
  const std::size_t n = trajectories_of(rewards.size(), spec.turns);
  std::vector<double> out = rewards;
  if (spec.returns == TurnReturns::discounted)
    for (uint32_t t = spec.turns - 1; t-- > 0;)
      for (std::size_t j = 0; j < n; ++j) out[t * n + j] += spec.gamma * out[(t + 1) * n + j];
  return out;
}

std::vector<double> turn_advantages(const std::vector<double>& returns, uint32_t turns, const AdvantageSpec& spec) {
  const std::size_t n = trajectories_of(returns.size(), turns);
  if (turns == 1) return advantages(returns, spec);
  std::vector<double> out(returns.size(), 0.0);
  for (uint32_t t = 0; t < turns; ++t) {
    const std::vector<double> slice(returns.begin() + static_cast<std::ptrdiff_t>(t * n),
                                    returns.begin() + static_cast<std::ptrdiff_t>((t + 1) * n));
    const auto a = advantages(slice, spec);
    for (std::size_t j = 0; j < a.size(); ++j) out[t * n + j] = a[j];
  }
  return out;
}

std::vector<std::size_t> best_turns(const std::vector<double>& values, uint32_t turns) {
  const std::size_t n = trajectories_of(values.size(), turns);
  std::vector<std::size_t> best(n);
  for (std::size_t j = 0; j < n; ++j) {
    best[j] = j;
    for (uint32_t t = 1; t < turns; ++t)
      if (values[t * n + j] > values[best[j]]) best[j] = t * n + j;
  }
  return best;
}

namespace {

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

// softmax(beta * r), shifted by the maximum so large rewards cannot overflow.
std::vector<double> softmax(const std::vector<double>& r, double beta) {
  const double top = *std::max_element(r.begin(), r.end());
  std::vector<double> q(r.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) sum += q[i] = std::exp(beta * (r[i] - top));
  for (double& x : q) x /= sum;
  return q;
}

double kl_to_uniform(const std::vector<double>& q) {
  const double n = static_cast<double>(q.size());
  double kl = 0.0;
  for (double x : q)
    if (x > 0.0) kl += x * std::log(x * n);
  return kl;
}

// w_i - 1 with w_i = q_i * n (the exponential weights normalised to mean 1).
std::vector<double> entropic(const std::vector<double>& r, double beta) {
  auto q = softmax(r, beta);
  for (double& x : q) x = x * static_cast<double>(r.size()) - 1.0;
  return q;
}

}  // namespace

double adaptive_beta(const std::vector<double>& rewards, double kl_target) {
  if (rewards.size() < 2) return 0.0;
  const auto [lo_it, hi_it] = std::minmax_element(rewards.begin(), rewards.end());
  if (*hi_it - *lo_it <= 0.0) return 0.0;
  // KL grows with beta from 0 towards ln(n / ties at the top); a target beyond reach gets the largest beta tried.
  double lo = 0.0, hi = 1.0;
  while (kl_to_uniform(softmax(rewards, hi)) < kl_target && hi < 1e12) hi *= 2.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (kl_to_uniform(softmax(rewards, mid)) < kl_target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<double> advantages(const std::vector<double>& r, const AdvantageSpec& spec) {
  if (r.empty()) return {};
  const bool constant = std::all_of(r.begin(), r.end(), [&](double x) { return x == r.front(); });
  if (constant && spec.drop_constant_groups) return {};
  const double m = mean(r);
  std::vector<double> a(r.size());
  switch (spec.kind) {
    case AdvantageKind::grpo: {
      double var = 0.0;
      for (double x : r) var += (x - m) * (x - m);
      const double sd = std::sqrt(var / r.size());
      for (std::size_t i = 0; i < r.size(); ++i) a[i] = (r[i] - m) / (sd + spec.epsilon);
      return a;
    }
    case AdvantageKind::dr_grpo:
      for (std::size_t i = 0; i < r.size(); ++i) a[i] = r[i] - m;
      return a;
    case AdvantageKind::rloo:
    case AdvantageKind::trloo: {
      if (r.size() < 2) return std::vector<double>(r.size(), 0.0);
      const double sum = m * r.size();
      for (std::size_t i = 0; i < r.size(); ++i) a[i] = r[i] - (sum - r[i]) / (r.size() - 1);
      return a;
    }
    case AdvantageKind::entropic: return entropic(r, spec.beta);
    case AdvantageKind::entropic_adaptive_beta: return entropic(r, adaptive_beta(r, spec.kl_target));
  }
  return a;
}

double RunningBaseline::center(double reward) {
  const double centered = count_ == 0 ? 0.0 : reward - value_;
  value_ = count_ == 0 ? reward : decay_ * value_ + (1.0 - decay_) * reward;
  ++count_;
  return centered;
}

}  // namespace crucible::rewards

// Rewards from verdicts and group-relative advantages, checked against values worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "rewards/advantage.h"
#include "rewards/group_scorer.h"
#include "rewards/reward.h"

using namespace crucible;
using rewards::AdvantageKind;
using rewards::AdvantageSpec;

namespace {

eval::Verdict verdict(eval::Status status, double speedup = 0.0, double median_us = 0.0) {
  eval::Verdict v;
  v.status = status;
  if (speedup > 0.0) v.speedup = speedup;
  if (median_us > 0.0) {
    eval::TimingStats t;
    t.median_us = median_us;
    v.candidate_time = t;
  }
  return v;
}

std::vector<double> advantages(AdvantageKind kind, const std::vector<double>& r) {
  AdvantageSpec spec;
  spec.kind = kind;
  return rewards::advantages(r, spec);
}

double kl_to_uniform(const std::vector<double>& r, double beta) {
  double top = r[0];
  for (double x : r) top = std::max(top, x);
  std::vector<double> q;
  double sum = 0.0;
  for (double x : r) sum += q.emplace_back(std::exp(beta * (x - top)));
  double kl = 0.0;
  for (double x : q) kl += x / sum * std::log(x / sum * r.size());
  return kl;
}

}  // namespace

TEST_CASE("a noisy timing counts as parity at best in every reward kind") {
  struct Row {
    rewards::RewardKind kind;
    double speedup, candidate_us, reference_us;
    bool noisy;
    double expected;
  };
  const Row rows[] = {
      {rewards::RewardKind::speedup, 3.0, 10.0, 30.0, false, 3.0},
      {rewards::RewardKind::speedup, 3.0, 10.0, 30.0, true, 1.0},   // a gain it could not pin down: parity
      {rewards::RewardKind::speedup, 0.5, 60.0, 30.0, true, 0.5},   // a slow one stays slow
      {rewards::RewardKind::composite, 3.0, 10.0, 30.0, true, 0.1 + 0.3 + 1.0},
      {rewards::RewardKind::inverse_runtime, 3.0, 10.0, 30.0, false, 1000.0 / 10.0},
      {rewards::RewardKind::inverse_runtime, 3.0, 10.0, 30.0, true, 1000.0 / 30.0},
      {rewards::RewardKind::inverse_runtime, 0.5, 60.0, 30.0, true, 1000.0 / 60.0},
  };
  for (const Row& row : rows) {
    eval::Verdict v = verdict(eval::Status::correct, row.speedup, row.candidate_us);
    eval::TimingStats reference;
    reference.median_us = row.reference_us;
    v.reference_time = reference;
    if (row.noisy) v.reasons.push_back({eval::ReasonCode::timing_noisy, "pairs spread"});
    rewards::RewardSpec spec;
    spec.kind = row.kind;
    CAPTURE(rewards::reward_kind_name(row.kind));
    CAPTURE(row.noisy);
    CHECK(rewards::reward(v, spec) == doctest::Approx(row.expected));
  }
}

TEST_CASE("each reward kind turns a verdict into the value its definition gives") {
  rewards::RewardSpec speedup;
  CHECK(rewards::reward(verdict(eval::Status::correct, 2.5), speedup) == doctest::Approx(2.5));
  CHECK(rewards::reward(verdict(eval::Status::incorrect, 2.5), speedup) == 0.0);  // correctness-gated

  rewards::RewardSpec composite;
  composite.kind = rewards::RewardKind::composite;  // alpha 0.1, beta 0.3, gamma 1, r_max 10
  CHECK(rewards::reward(verdict(eval::Status::compile_error), composite) == 0.0);
  CHECK(rewards::reward(verdict(eval::Status::parse_error), composite) == 0.0);  // no code at all: no compile bonus
  CHECK(rewards::reward(verdict(eval::Status::incorrect), composite) == doctest::Approx(0.1));
  CHECK(rewards::reward(verdict(eval::Status::correct, 2.0), composite) == doctest::Approx(2.4));
  CHECK(rewards::reward(verdict(eval::Status::correct, 50.0), composite) == doctest::Approx(10.4));  // capped

  rewards::RewardSpec inverse;
  inverse.kind = rewards::RewardKind::inverse_runtime;  // scale 1000
  CHECK(rewards::reward(verdict(eval::Status::correct, 1.0, 50.0), inverse) == doctest::Approx(20.0));
  CHECK(rewards::reward(verdict(eval::Status::timeout, 0.0, 50.0), inverse) == 0.0);

  CHECK(rewards::parse_reward_kind("inverse_runtime") == rewards::RewardKind::inverse_runtime);
  CHECK_THROWS_AS(rewards::parse_reward_kind("speed"), std::invalid_argument);
}

TEST_CASE("grpo, dr_grpo and rloo advantages of a small group") {
  const std::vector<double> r{1.0, 2.0, 3.0};
  auto grpo = advantages(AdvantageKind::grpo, r);  // mean 2, population sd sqrt(2/3)
  CHECK(grpo[0] == doctest::Approx(-1.224744).epsilon(1e-5));
  CHECK(grpo[1] == doctest::Approx(0.0));
  CHECK(grpo[2] == doctest::Approx(1.224744).epsilon(1e-5));
  auto dr = advantages(AdvantageKind::dr_grpo, r);
  CHECK(dr == std::vector<double>{-1.0, 0.0, 1.0});
  auto rloo = advantages(AdvantageKind::rloo, r);  // each against the mean of the other two
  CHECK(rloo[0] == doctest::Approx(-1.5));
  CHECK(rloo[1] == doctest::Approx(0.0));
  CHECK(rloo[2] == doctest::Approx(1.5));
  CHECK(rewards::parse_advantage_kind("rloo") == AdvantageKind::rloo);
  CHECK_THROWS_AS(rewards::parse_advantage_kind("ppo"), std::invalid_argument);
}

TEST_CASE("entropic advantages weight the best sample exponentially and average to zero") {
  const std::vector<double> r{0.0, 1.0, 2.0, 5.0};
  AdvantageSpec spec;
  spec.kind = AdvantageKind::entropic;
  spec.beta = 0.0;  // uniform weights: no preference at all
  for (double a : rewards::advantages(r, spec)) CHECK(a == doctest::Approx(0.0));
  spec.beta = 20.0;  // nearly the max: the best takes all the weight
  auto a = rewards::advantages(r, spec);
  CHECK(a[3] == doctest::Approx(3.0).epsilon(1e-6));
  CHECK(a[0] == doctest::Approx(-1.0).epsilon(1e-6));
  CHECK(std::accumulate(a.begin(), a.end(), 0.0) == doctest::Approx(0.0).epsilon(1e-9));
  spec.beta = 1.0;  // w = n * softmax(r): check one value by hand
  a = rewards::advantages(r, spec);
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(5.0);
  CHECK(a[2] == doctest::Approx(4.0 * std::exp(2.0) / z - 1.0));
}

TEST_CASE("the adaptive beta puts the group's weights exactly gamma nats from uniform") {
  const std::vector<double> r{0.3, 0.5, 0.9, 1.4, 0.2, 0.8, 1.1, 0.7};
  for (double gamma : {0.1, 0.693147, 1.5}) {
    double beta = rewards::adaptive_beta(r, gamma);
    CHECK(beta > 0.0);
    CHECK(kl_to_uniform(r, beta) == doctest::Approx(gamma).epsilon(1e-6));
  }
  // Scale invariance: rewards ten times larger need a tenth of the beta.
  std::vector<double> scaled;
  for (double x : r) scaled.push_back(10.0 * x);
  CHECK(rewards::adaptive_beta(scaled, 0.693147) == doctest::Approx(rewards::adaptive_beta(r, 0.693147) / 10.0));
  auto a = advantages(AdvantageKind::entropic_adaptive_beta, r);
  CHECK(std::max_element(a.begin(), a.end()) - a.begin() == 3);  // the best sample leads
}

TEST_CASE("constant-reward groups give zero advantages, or none when they are dropped") {
  const std::vector<double> r(8, 0.4);
  for (auto kind : {AdvantageKind::grpo, AdvantageKind::dr_grpo, AdvantageKind::rloo, AdvantageKind::entropic,
                    AdvantageKind::entropic_adaptive_beta})
    for (double a : advantages(kind, r)) CHECK(a == doctest::Approx(0.0));
  AdvantageSpec drop;
  drop.drop_constant_groups = true;
  CHECK(rewards::advantages(r, drop).empty());
  CHECK(rewards::advantages({0.4, 0.5}, drop).size() == 2);
}

TEST_CASE("a running baseline centres rewards on the task's recent mean") {
  rewards::RunningBaseline baseline(0.5);
  CHECK(baseline.empty());
  CHECK(baseline.center(4.0) == 0.0);  // nothing to compare the first reward with
  CHECK(baseline.value() == doctest::Approx(4.0));
  CHECK(baseline.center(2.0) == doctest::Approx(-2.0));
  CHECK(baseline.value() == doctest::Approx(3.0));
  CHECK(baseline.center(5.0) == doctest::Approx(2.0));
}

TEST_CASE("multi-turn: per-turn and discounted returns, TRLOO per turn, and each trajectory's best turn") {
  // Three trajectories, two turns, laid out turn by turn.
  const std::vector<double> r{1.0, 0.0, 2.0, /* turn 1 */ 3.0, 1.0, 2.0};
  rewards::MultiTurnSpec per_turn{2, rewards::TurnReturns::per_turn, 0.4};
  CHECK(rewards::turn_returns(r, per_turn) == r);
  AdvantageSpec trloo;
  trloo.kind = AdvantageKind::trloo;
  const auto a = rewards::turn_advantages(r, 2, trloo);  // each against the other trajectories at its turn
  const std::vector<double> expected{0.0, -1.5, 1.5, 1.5, -1.5, 0.0};
  REQUIRE(a.size() == expected.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(expected[i]));

  rewards::MultiTurnSpec discounted{2, rewards::TurnReturns::discounted, 0.4};
  const auto g = rewards::turn_returns(r, discounted);  // turn 0: r0 + 0.4 r1
  const std::vector<double> returns{2.2, 0.4, 2.8, 3.0, 1.0, 2.0};
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(returns[i]));
  const auto ad = rewards::turn_advantages(g, 2, trloo);
  CHECK(ad[0] == doctest::Approx(0.6));
  CHECK(ad[1] == doctest::Approx(-2.1));
  CHECK(ad[2] == doctest::Approx(1.5));

  // Best across turns: trajectory 0 at turn 1, 1 at turn 1, 2 ties and keeps its earlier turn.
  CHECK(rewards::best_turns(r, 2) == std::vector<std::size_t>{3, 4, 2});
  // One turn is the plain estimator; an uneven layout is refused.
  CHECK(rewards::turn_advantages({1.0, 2.0, 3.0}, 1, trloo) == advantages(AdvantageKind::rloo, {1.0, 2.0, 3.0}));
  CHECK_THROWS_AS(rewards::turn_advantages({1.0, 2.0, 3.0}, 2, trloo), std::invalid_argument);
  CHECK(rewards::parse_advantage_kind("trloo") == AdvantageKind::trloo);
  CHECK(rewards::parse_turn_returns("discounted") == rewards::TurnReturns::discounted);
  CHECK_THROWS_AS(rewards::parse_turn_returns("sum"), std::invalid_argument);
  // A turn whose rewards are all equal is dropped alone when dropping is on: zeros there, the other turn kept.
  trloo.drop_constant_groups = true;
  const auto dropped = rewards::turn_advantages({1.0, 1.0, 0.0, 2.0}, 2, trloo);
  CHECK(dropped == std::vector<double>{0.0, 0.0, -2.0, 2.0});
}

TEST_CASE("profiling: kernel coverage adds to a correct sample's reward and rejects below the threshold, unmeasured, neither") {
  rewards::RewardSpec spec;
  spec.coverage_weight = 0.5;
  spec.min_coverage = 0.6;
  auto gpu = verdict(eval::Status::correct, 2.0);
  gpu.kernel_coverage = 0.8;
  CHECK(rewards::reward(gpu, spec) == doctest::Approx(2.0 + 0.5 * 0.8));
  CHECK_FALSE(rewards::rejected_for_coverage(gpu, spec));
  gpu.kernel_coverage = 0.3;  // most of its time in library kernels or copies
  CHECK(rewards::reward(gpu, spec) == doctest::Approx(2.0 + 0.5 * 0.3));
  CHECK(rewards::rejected_for_coverage(gpu, spec));
  auto cpu = verdict(eval::Status::correct, 2.0);  // the CPU measures no coverage
  CHECK(rewards::reward(cpu, spec) == doctest::Approx(2.0));
  CHECK_FALSE(rewards::rejected_for_coverage(cpu, spec));
  auto wrong = verdict(eval::Status::incorrect);
  wrong.kernel_coverage = 1.0;
  CHECK(rewards::reward(wrong, spec) == 0.0);
  CHECK_FALSE(rewards::rejected_for_coverage(wrong, spec));
}

TEST_CASE("group scorer: which groups are judged, and a judge's scores added where they are numbers") {
  struct ShareRow {
    std::vector<eval::Status> statuses;
    double share;
  };
  for (const auto& r : std::vector<ShareRow>{{{}, 0.0},
                                             {{eval::Status::correct}, 1.0},
                                             {{eval::Status::correct, eval::Status::incorrect,
                                               eval::Status::compile_error, eval::Status::correct},
                                              0.5}}) {
    std::vector<eval::Verdict> group;
    for (auto s : r.statuses) group.push_back(verdict(s));
    CHECK(rewards::correct_share(group) == doctest::Approx(r.share));
  }
  rewards::ScoringSpec spec;
  spec.judge_weight = 2.0;
  rewards::GroupScorer scorer(spec);
  const auto group = std::vector<eval::Verdict>{verdict(eval::Status::correct, 1.5), verdict(eval::Status::incorrect),
                                                verdict(eval::Status::correct, 3.0)};
  auto r = scorer.rewards(group);
  CHECK(r == std::vector<double>{1.5, 0.0, 3.0});
  scorer.add_judge_scores(r, {0.5, std::nan(""), 1.0});  // the second judgement failed: nothing added
  CHECK(r == std::vector<double>{2.5, 0.0, 5.0});
}

TEST_CASE("group scorer: advantages of a group, with coverage rejection, turns and per-task baselines") {
  rewards::ScoringSpec spec;
  spec.reward.min_coverage = 0.6;
  auto thin = verdict(eval::Status::correct, 4.0);
  thin.kernel_coverage = 0.2;  // correct, but most of its time outside its own kernels
  const std::vector<eval::Verdict> group{verdict(eval::Status::correct, 3.0), thin, verdict(eval::Status::incorrect)};
  rewards::GroupScorer scorer(spec);
  const auto r = scorer.rewards(group);
  const auto a = scorer.advantages("relu", r, group, 1);
  REQUIRE(a.size() == 3);
  CHECK(a[0] != 0.0);
  CHECK(a[1] == 0.0);  // rejected: trains nothing
  CHECK(a[2] < 0.0);
  CHECK(scorer.advantages("relu", r, group, 0) == a);  // no turns counts as one

  spec.task_baseline = true;
  rewards::GroupScorer with_baseline(spec), fresh(spec);
  const std::vector<double> rewards{1.0, 2.0, 4.0};
  const std::vector<eval::Verdict> plain(3, verdict(eval::Status::incorrect));
  const auto relu = with_baseline.advantages("relu", rewards, plain, 1);
  CHECK(with_baseline.advantages("relu", rewards, plain, 1) != relu);  // the task's baseline has moved
  CHECK(with_baseline.advantages("gelu", rewards, plain, 1) == fresh.advantages("gelu", rewards, plain, 1));
}

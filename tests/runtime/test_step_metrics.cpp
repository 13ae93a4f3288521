#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "run/step_metrics.h"

using namespace crucible;
using run::Outcome;

namespace {

// relu: two correct samples (2x and 0.5x); gelu: one wrong but "fast" sample and one that did not compile;
// matmul: one correct sample at exactly 1.2x.
std::vector<Outcome> sample_step() {
  return {
      {"relu", true, true, 2.0, 1.0},
      {"relu", true, true, 0.5, 0.2},
      {"gelu", true, false, 3.0, 0.1},
      {"gelu", false, false, std::nullopt, -1.0},
      {"matmul", true, true, 1.2, 0.7},
  };
}

}  // namespace

TEST_CASE("step metrics from hand-computed outcomes") {
  auto m = run::compute_metrics(sample_step());
  CHECK(m.samples == 5);
  CHECK(m.reward_mean == doctest::Approx(0.2));  // (1 + 0.2 + 0.1 - 1 + 0.7) / 5
  CHECK(m.reward_max == doctest::Approx(1.0));
  CHECK(m.compiled == doctest::Approx(0.8));
  CHECK(m.correct == doctest::Approx(0.6));
  CHECK(m.fast_0 == doctest::Approx(0.6));    // the wrong 3x sample never counts
  CHECK(m.fast_1 == doctest::Approx(0.4));    // 2.0 and 1.2
  CHECK(m.fast_1_2 == doctest::Approx(0.2));  // strictly above 1.2: only 2.0
  REQUIRE(m.geomean_speedup.has_value());
  CHECK(*m.geomean_speedup == doctest::Approx(std::cbrt(2.0 * 0.5 * 1.2)));
  REQUIRE(m.per_task_best.size() == 3);
  CHECK(m.per_task_best["relu"].reward == doctest::Approx(1.0));
  CHECK(m.per_task_best["relu"].speedup == 2.0);
  CHECK(m.per_task_best["gelu"].reward == doctest::Approx(0.1));
  CHECK_FALSE(m.per_task_best["gelu"].speedup.has_value());
  CHECK(m.per_task_best["matmul"].speedup == 1.2);
}

TEST_CASE("fast_p counts over all samples, strictly above p, correct only") {
  std::vector<Outcome> outcomes{{"t", true, true, 1.0, 0}, {"t", true, true, std::nullopt, 0},
                                {"t", true, true, 1.5, 0}, {"t", true, false, 9.0, 0}};
  CHECK(run::fast_p(outcomes, 1.0) == doctest::Approx(0.25));
  CHECK(run::fast_p(outcomes, 0.0) == doctest::Approx(0.5));
  CHECK(run::fast_p(outcomes, 2.0) == 0.0);
  CHECK(run::fast_p({}, 1.0) == 0.0);
}

TEST_CASE("negative rewards: the max is the largest, not zero") {
  auto m = run::compute_metrics({{"t", false, false, std::nullopt, -1.0}, {"t", true, false, std::nullopt, -0.5}});
  CHECK(m.reward_max == doctest::Approx(-0.5));
  CHECK(m.per_task_best["t"].reward == doctest::Approx(-0.5));
  CHECK_FALSE(m.geomean_speedup.has_value());
}

TEST_CASE("no samples give zeros and no geomean") {
  auto m = run::compute_metrics({});
  CHECK(m.samples == 0);
  CHECK(m.reward_mean == 0.0);
  CHECK(m.correct == 0.0);
  CHECK_FALSE(m.geomean_speedup.has_value());
  CHECK(m.per_task_best.empty());
  auto j = nlohmann::json::parse(run::metrics_json(m));
  CHECK(j["geomean_speedup"].is_null());
  CHECK(j["per_task_best"].is_object());
}

TEST_CASE("metrics JSON carries every field, per-task bests keyed by task") {
  auto text = run::metrics_json(run::compute_metrics(sample_step()));
  CHECK(text.find('\n') == std::string::npos);  // one line of steps.jsonl
  auto j = nlohmann::json::parse(text);
  CHECK(j["samples"] == 5);
  CHECK(j["fast_1"].get<double>() == doctest::Approx(0.4));
  CHECK(j["fast_1_2"].get<double>() == doctest::Approx(0.2));
  CHECK(j["geomean_speedup"].get<double>() == doctest::Approx(std::cbrt(1.2)));
  CHECK(j["per_task_best"]["relu"]["speedup"] == 2.0);
  CHECK(j["per_task_best"]["gelu"]["speedup"].is_null());
  CHECK(j["per_task_best"]["matmul"]["reward"].get<double>() == doctest::Approx(0.7));
}

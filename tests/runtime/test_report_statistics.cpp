// The statistics of reports against hand-computed cases: quantiles, bands, bootstrap intervals.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "report/statistics.h"

using namespace crucible::report;

TEST_CASE("report statistics: quantiles interpolate between order statistics") {
  struct Row {
    std::vector<double> values;
    double q, expect;
  };
  for (const auto& r : std::vector<Row>{{{3, 1, 2}, 0.5, 2}, {{1, 2, 3, 4}, 0.5, 2.5}, {{1, 2, 3, 4}, 0.25, 1.75},
                                        {{5}, 0.975, 5}, {{0, 10}, 0.025, 0.25}, {{0, 10}, 1.0, 10}}) {
    CAPTURE(r.q);
    CHECK(quantile(r.values, r.q) == doctest::Approx(r.expect));
  }
  CHECK_THROWS_AS(quantile({}, 0.5), std::invalid_argument);
}

TEST_CASE("report statistics: a band is the mean with the extremes") {
  const auto b = band({0.2, 0.6, 0.4});
  CHECK(b.mean == doctest::Approx(0.4));
  CHECK(b.low == 0.2);
  CHECK(b.high == 0.6);
  CHECK(b.n == 3);
  CHECK(band({}).n == 0);
}

TEST_CASE("report statistics: bootstrap intervals on hand-computed cases") {
  // Constant values: every resample has the same mean.
  auto c = bootstrap_mean({0.5, 0.5, 0.5, 0.5});
  CHECK(c.mean == 0.5);
  CHECK(c.low == 0.5);
  CHECK(c.high == 0.5);
  // Two values 0 and 1: resampled means are 0, 0.5 and 1 with probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5%
  // quantiles of thousands of them are 0 and 1.
  auto two = bootstrap_mean({0.0, 1.0});
  CHECK(two.mean == 0.5);
  CHECK(two.low == 0.0);
  CHECK(two.high == 1.0);
  // 40 values, 12 of them 1: the bootstrap's interval is close to the normal one, p +- 1.96 sqrt(p (1 - p) / n).
  std::vector<double> hits(40, 0.0);
  for (int i = 0; i < 12; ++i) hits[i * 3] = 1.0;
  auto ci = bootstrap_mean(hits, 0.95, 20000, 7);
  const double p = 0.3, half = 1.96 * std::sqrt(p * (1 - p) / 40);
  CHECK(ci.mean == doctest::Approx(p));
  CHECK(ci.low == doctest::Approx(p - half).epsilon(0.1));
  CHECK(ci.high == doctest::Approx(p + half).epsilon(0.1));
  // Deterministic for a seed; a narrower level gives a narrower interval.
  CHECK(bootstrap_mean(hits, 0.95, 2000, 3).low == bootstrap_mean(hits, 0.95, 2000, 3).low);
  auto narrow = bootstrap_mean(hits, 0.5, 20000, 7);
  CHECK(narrow.high - narrow.low < ci.high - ci.low);
}

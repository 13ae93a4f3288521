// When paired CPU samples are enough, and what their median speedup and spread are, from hand-made samples.
#include <doctest/doctest.h>

#include "paired_timing.h"

using namespace crucible::eval;

namespace {

// n pairs whose ratios cycle through `ratios` (candidate 100 us each).
PairedSamples pairs_with(int n, std::initializer_list<double> ratios) {
  PairedSamples p;
  std::vector<double> r(ratios);
  for (int i = 0; i < n; ++i) p.add(100.0, 100.0 * r[static_cast<std::size_t>(i) % r.size()]);
  return p;
}

}  // namespace

TEST_CASE("the median speedup of pairs and their spread") {
  PairedSamples p = pairs_with(5, {1.0, 2.0, 3.0, 4.0, 5.0});
  CHECK(p.median_ratio() == doctest::Approx(3.0));
  CHECK(p.spread() == doctest::Approx((4.0 - 2.0) / 3.0));
  CHECK(p.candidate_seconds() == doctest::Approx(5 * 100e-6));
  CHECK(pairs_with(9, {2.0}).spread() == 0.0);
  CHECK(pairs_with(9, {2.0}).half_width() == 0.0);
}

TEST_CASE("pairs are taken until the median is tight, and no longer than the limit") {
  PairedTimingRule rule;
  rule.min_pairs = 5;
  rule.max_pairs = 40;
  rule.tight = 0.10;
  struct Row {
    int n;
    std::initializer_list<double> ratios;
    double min_candidate_s;
    PairedVerdict expected;
  };
  const Row rows[] = {
      {4, {1.0}, 0.0, PairedVerdict::more},          // fewer than the mode's count
      {5, {1.0}, 0.0, PairedVerdict::tight},         // identical pairs: tight at once
      {5, {1.0}, 1.0, PairedVerdict::more},          // full mode wants more of the candidate's time
      {40, {1.0}, 1.0, PairedVerdict::tight},        // ... but not past the limit
      {5, {0.5, 1.0, 1.5}, 0.0, PairedVerdict::more},    // spread 0.5: notch 1.57 * 0.5 / sqrt(5) = 0.35
      {39, {0.5, 1.0, 1.5}, 0.0, PairedVerdict::more},   // still 0.25
      {40, {0.5, 1.0, 1.5}, 0.0, PairedVerdict::noisy},  // the limit, still wide: timing_noisy
      {20, {0.95, 1.0, 1.05}, 0.0, PairedVerdict::tight},
  };
  for (const Row& row : rows) {
    rule.min_candidate_s = row.min_candidate_s;
    CAPTURE(row.n);
    CHECK(assess_pairs(pairs_with(row.n, row.ratios), rule) == row.expected);
  }
}

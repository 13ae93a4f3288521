#pragma once
// The statistics reports show: a band across seeds, and a bootstrap confidence interval of a mean.
#include <cstdint>
#include <vector>

namespace crucible::report {

struct Band {
  double mean = 0, low = 0, high = 0;  // low/high: the smallest and largest value
  int n = 0;
};
Band band(const std::vector<double>& values);

struct Interval {
  double mean = 0, low = 0, high = 0;
  int n = 0;
};
// The percentile bootstrap: `resamples` means of n values drawn with replacement, the interval between the
// (1 - level) / 2 and (1 + level) / 2 quantiles of those means (linear interpolation). Deterministic for a seed.
Interval bootstrap_mean(const std::vector<double>& values, double level = 0.95, int resamples = 4000, uint64_t seed = 1);

// The q-quantile of values (0 <= q <= 1), linear between order statistics as numpy's default does.
double quantile(std::vector<double> values, double q);

}  // namespace crucible::report

#include "report/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace crucible::report {

Band band(const std::vector<double>& values) {
  Band b;
  b.n = static_cast<int>(values.size());
  if (values.empty()) return b;
  b.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  b.low = *lo;
  b.high = *hi;
  return b;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw std::invalid_argument("the quantile of no values");
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const auto above = std::min(values.size() - 1, below + 1);
  return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
}

Interval bootstrap_mean(const std::vector<double>& values, double level, int resamples, uint64_t seed) {
  Interval out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) return out;
  out.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, values.size() - 1);
  std::vector<double> means(static_cast<std::size_t>(std::max(1, resamples)));
  for (auto& m : means) {
    double sum = 0;
    for (std::size_t i = 0; i < values.size(); ++i) sum += values[pick(rng)];
    m = sum / values.size();
  }
  out.low = quantile(means, (1.0 - level) / 2);
  out.high = quantile(means, (1.0 + level) / 2);
  return out;
}

}  // namespace crucible::report

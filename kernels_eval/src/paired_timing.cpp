#include "paired_timing.h"

#include <algorithm>
#include <cmath>

namespace crucible::eval {
namespace {

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double x = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(x);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (x - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

void PairedSamples::add(double candidate_us, double reference_us) {
  candidate_us_.push_back(candidate_us);
  reference_us_.push_back(reference_us);
  candidate_s_ += candidate_us * 1e-6;
}

std::vector<double> PairedSamples::sorted_ratios() const {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < candidate_us_.size(); ++i)
    if (candidate_us_[i] > 0.0) ratios.push_back(reference_us_[i] / candidate_us_[i]);
  std::sort(ratios.begin(), ratios.end());
  return ratios;
}

double PairedSamples::median_ratio() const { return quantile(sorted_ratios(), 0.5); }

double PairedSamples::spread() const {
  const std::vector<double> ratios = sorted_ratios();
  const double mid = quantile(ratios, 0.5);
  return ratios.size() >= 2 && mid > 0.0 ? (quantile(ratios, 0.75) - quantile(ratios, 0.25)) / mid : 0.0;
}

double PairedSamples::half_width() const {
  const std::size_t n = sorted_ratios().size();
  return n >= 2 ? 1.57 * spread() / std::sqrt(static_cast<double>(n)) : INFINITY;
}

PairedVerdict assess_pairs(const PairedSamples& samples, const PairedTimingRule& rule) {
  const auto n = static_cast<int>(samples.size());
  const bool tight = samples.half_width() <= rule.tight;
  if (n >= std::max(rule.max_pairs, rule.min_pairs)) return tight ? PairedVerdict::tight : PairedVerdict::noisy;
  const bool enough = n >= rule.min_pairs && samples.candidate_seconds() >= rule.min_candidate_s;
  return enough && tight ? PairedVerdict::tight : PairedVerdict::more;
}

}  // namespace crucible::eval

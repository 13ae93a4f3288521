#pragma once
// Candidate and reference samples taken in pairs, one moment each, and when there are enough of them. A pair's
// ratio (reference over candidate) is that moment's speedup; the speedup reported is their median. How far the
// median can be trusted is the notch of a box plot: 1.57 x IQR / sqrt(n), over the median.
#include <cstddef>
#include <vector>

namespace crucible::eval {

struct PairedTimingRule {
  int min_pairs = 5;             // the mode's count of timed calls
  int max_pairs = 40;            // then the measurement stops, tight or not
  double min_candidate_s = 0.0;  // the candidate's summed time a measurement needs at least
  double tight = 0.10;           // the median's relative half-width that ends a measurement early
};

class PairedSamples {
 public:
  void add(double candidate_us, double reference_us);
  std::size_t size() const { return candidate_us_.size(); }
  const std::vector<double>& candidate_us() const { return candidate_us_; }
  const std::vector<double>& reference_us() const { return reference_us_; }
  double candidate_seconds() const { return candidate_s_; }
  double median_ratio() const;
  // Interquartile range of the ratios over their median: how much one moment differs from the next.
  double spread() const;
  // The median's relative uncertainty (the notch): what decides whether more pairs are needed.
  double half_width() const;

 private:
  std::vector<double> sorted_ratios() const;
  std::vector<double> candidate_us_, reference_us_;
  double candidate_s_ = 0.0;
};

enum class PairedVerdict { more, tight, noisy };

// After each pair: go on, stop with a trustworthy median, or stop with one that is not (`timing_noisy`).
PairedVerdict assess_pairs(const PairedSamples& samples, const PairedTimingRule& rule);

}  // namespace crucible::eval

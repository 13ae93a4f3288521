#pragma once
// Small decisions of timing: how long it warms up, how far a spread set of samples is extended (GPU), and how long a
// whole evaluation may take.
#include <algorithm>
#include <cmath>

namespace crucible::eval {

// An evaluation's derived wall-clock budget: 50 times the reference's time for every call the evaluation may make, and
// never less than `floor_s` (a loaded machine can slow an honest evaluation several times over).
inline double derived_evaluation_budget(double floor_s, double reference_call_s, int planned_calls) {
  return std::max(floor_s, 50.0 * reference_call_s * planned_calls);
}

// A count of calls and a stretch of wall time, whichever ends later, within a cap on calls. A count alone does not
// do on a GPU: the first calls of a TriMul shape ran 1-3% slow for 15-80 ms (up to seven 10 ms calls), far past the
// one call that a count sized for gigabyte inputs allows; a stretch alone would make thousands of calls of a
// microsecond kernel, hence the cap.
struct WarmupRule {
  int min_calls = 1;
  double min_s = 0.0;
  int max_calls = 200;
};

inline bool warmed_up(const WarmupRule& rule, int calls, double elapsed_s) {
  if (calls >= std::max(rule.min_calls, rule.max_calls)) return true;
  return calls >= rule.min_calls && elapsed_s >= rule.min_s;
}

// A set of samples (timed calls, or the reference's samples) whose CV is over `max_cv` is extended with more of the
// same, and all of them are summarised together. On an otherwise idle H100 a shape's calls spread by 0.1-0.5%, but
// now and then stretches of calls run slow: 5-99% in the GPU's own events, or, for a Triton candidate, its Python
// launches 3-4x slower for a few hundred milliseconds (which idles the GPU between its kernels). Fifty calls of a 5 ms
// shape last a quarter second and catch one such stretch or none; calls spanning a second sample them. So a spread set
// grows to `min_pool_s` of samples in all, by at least one more set and to at most `max_sets` sets. The budget
// (`budget_left_s`; negative or zero: no budget) must keep half of what is left: an extension must never cost a
// verdict.
struct ExtendRule {
  double max_cv = 0.01;
  double min_pool_s = 0.0;
  int max_sets = 2;
};

// Full mode's times are the ones reported and ranked: a set past 0.5% (the spread a GPU timing is held to) grows to a
// second of samples, at most four sets. Fast mode's five samples guide a search: past 1%, one more set.
inline ExtendRule extend_rule(bool full) { return full ? ExtendRule{0.005, 1.0, 4} : ExtendRule{0.01, 0.0, 2}; }

// How many more samples a set of `taken` samples that took `taken_s` gets: 0 when it is kept as it is.
inline int extra_samples(const ExtendRule& rule, double cv, int taken, double taken_s, bool budgeted,
                         double budget_left_s) {
  if (!(cv > rule.max_cv) || taken <= 0 || !(taken_s > 0.0)) return 0;
  const double each_s = taken_s / taken;
  const double wanted = std::ceil(rule.min_pool_s / each_s) - taken;
  int extra = static_cast<int>(std::clamp(wanted, static_cast<double>(taken),
                                          static_cast<double>(std::max(rule.max_sets - 1, 1)) * taken));
  if (budgeted) extra = std::min(extra, static_cast<int>(std::floor(0.5 * budget_left_s / each_s)));
  // Less than one more set is not worth the time: a set's own spread says little about fewer.
  return extra >= taken ? extra : 0;
}

}  // namespace crucible::eval

#pragma once
// Small decisions of GPU timing: how long it warms up, and when a spread set of samples is taken again.
#include <algorithm>

namespace crucible::eval {

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

// A set of samples (timed calls, or the reference's samples) whose CV is over `max_cv` is taken once more, and the
// steadier set kept: on an otherwise idle H100 a shape's calls spread by 0.1-0.5%, but now and then a stretch of
// calls runs 5-99% slow in the GPU's own events with nothing of Crucible's beside it. Both sets are honest
// measurements; the steadier one says more about the kernel. Only where the evaluation's budget (`budget_left_s`,
// negative or zero: no budget) has room for twice what the first set took: a retake must never cost a verdict.
struct RetakeRule {
  double max_cv = 0.01;
};

// Full mode's times are the ones reported and ranked: a set past 0.5% (the spread a GPU timing is held to) is taken
// again. Fast mode's five samples guide a search: past 1%.
inline RetakeRule retake_rule(bool full) { return RetakeRule{full ? 0.005 : 0.01}; }

inline bool retake_samples(const RetakeRule& rule, double cv, double taken_s, bool budgeted, double budget_left_s) {
  if (!(cv > rule.max_cv)) return false;
  return !budgeted || budget_left_s > 2 * taken_s;
}

}  // namespace crucible::eval

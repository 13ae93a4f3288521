#pragma once
// How long a timing warms up before its samples count.
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

}  // namespace crucible::eval

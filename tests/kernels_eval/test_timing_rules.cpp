// GPU timing's small decisions from tables: when warm-up is over, and when a spread set of samples is taken again.
#include <doctest/doctest.h>

#include <cmath>

#include "crucible/eval/timing_rules.h"

using namespace crucible::eval;

TEST_CASE("warm-up lasts its calls and its time, whichever ends later, and never past the cap") {
  struct Row {
    WarmupRule rule;
    int calls;
    double elapsed_s;
    bool over;
  };
  const Row rows[] = {
      {{3, 0.0, 200}, 2, 5.0, false},   // a count alone: time does not end it early
      {{3, 0.0, 200}, 3, 0.0, true},
      {{1, 0.1, 200}, 1, 0.05, false},  // one 50 ms call of a sampled-check task: not yet
      {{1, 0.1, 200}, 2, 0.10, true},
      {{1, 0.1, 200}, 0, 1.0, false},   // never without a call
      {{3, 0.1, 200}, 2, 0.3, false},   // long calls: the count still holds
      {{3, 0.1, 200}, 199, 0.01, false},
      {{3, 0.1, 200}, 200, 0.01, true},  // microsecond calls: the cap ends it
      {{500, 0.0, 200}, 200, 1.0, false},  // a count above the cap is still met in full
      {{500, 0.0, 200}, 500, 1.0, true},
  };
  for (const auto& r : rows) {
    CAPTURE(r.rule.min_calls);
    CAPTURE(r.rule.min_s);
    CAPTURE(r.calls);
    CAPTURE(r.elapsed_s);
    CHECK(warmed_up(r.rule, r.calls, r.elapsed_s) == r.over);
  }
}

TEST_CASE("a spread set of samples is taken again only where the budget has room for it twice over") {
  struct Row {
    double cv, taken_s;
    bool budgeted;
    double budget_left_s;
    bool again;
  };
  const Row rows[] = {
      {0.005, 1.0, false, 0.0, false},  // steady: kept
      {0.010, 1.0, false, 0.0, false},  // at the limit: kept
      {0.011, 1.0, false, 0.0, true},   // spread, no budget: taken again
      {0.139, 1.0, true, 10.0, true},   // spread, room for twice as long
      {0.139, 1.0, true, 2.0, false},   // room for exactly twice: not more, so kept
      {0.139, 5.0, true, 9.0, false},   // a slow candidate near its budget: never at the cost of its verdict
      {0.139, 1.0, true, -1.0, false},  // budget already spent
  };
  for (const auto& r : rows) {
    CAPTURE(r.cv);
    CAPTURE(r.taken_s);
    CAPTURE(r.budget_left_s);
    CHECK(retake_samples(RetakeRule{}, r.cv, r.taken_s, r.budgeted, r.budget_left_s) == r.again);
  }
  CHECK_FALSE(retake_samples(RetakeRule{}, std::nan(""), 1.0, false, 0.0));  // no samples to judge
  // Full mode holds a set to 0.5%, fast mode to 1%.
  CHECK(retake_samples(retake_rule(true), 0.0051, 1.0, false, 0.0));
  CHECK_FALSE(retake_samples(retake_rule(true), 0.005, 1.0, false, 0.0));
  CHECK_FALSE(retake_samples(retake_rule(false), 0.0051, 1.0, false, 0.0));
  CHECK(retake_samples(retake_rule(false), 0.011, 1.0, false, 0.0));
}


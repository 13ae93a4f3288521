// When a timing's warm-up is over: calls, time and the cap, from a table.
#include <doctest/doctest.h>

#include "crucible/eval/warmup_rule.h"

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

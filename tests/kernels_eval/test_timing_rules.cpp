// Timing's small decisions from tables: when warm-up is over, how far a spread set of samples is extended, and the
// derived evaluation budget.
#include <doctest/doctest.h>

#include <cmath>

#include "custom_work_rule.h"
#include "timing_rules.h"

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

TEST_CASE("a spread set of samples grows by at least one set, to its mode's span, within half the budget left") {
  struct Row {
    ExtendRule rule;
    double cv;
    int taken;
    double taken_s;
    bool budgeted;
    double budget_left_s;
    int extra;
  };
  const ExtendRule full{0.005, 1.0, 4}, fast{0.01, 0.0, 2};
  const Row rows[] = {
      {full, 0.005, 50, 0.25, false, 0.0, 0},     // steady: kept
      {full, 0.0051, 50, 0.25, false, 0.0, 150},  // 5 ms calls: to a second, three more sets
      {full, 0.0051, 50, 0.5, false, 0.0, 50},    // 10 ms calls: one more set reaches the second
      {full, 0.0051, 50, 0.9, false, 0.0, 50},    // at least one more set
      {full, 0.0051, 50, 5.0, false, 0.0, 50},    // 100 ms calls: one more set, past the second
      {full, 0.0051, 50, 0.01, false, 0.0, 150},  // microsecond calls: four sets at most
      {full, 0.0051, 50, 0.25, true, 10.0, 150},  // room in the budget
      {full, 0.0051, 50, 0.25, true, 0.6, 60},    // half of what is left holds 60 more calls
      {full, 0.0051, 50, 0.25, true, 0.4, 0},     // not even one more set: kept
      {full, 0.0051, 50, 0.25, true, -1.0, 0},    // budget already spent
      {fast, 0.010, 5, 0.02, false, 0.0, 0},      // at fast mode's limit: kept
      {fast, 0.011, 5, 0.02, false, 0.0, 5},      // one more set
      {fast, 0.139, 5, 1.0, true, 10.0, 5},
      {fast, 0.139, 5, 1.0, true, 2.0, 5},        // half of what is left is exactly one more set
      {fast, 0.139, 5, 5.0, true, 9.0, 0},        // a slow candidate near its budget: never at the cost of its verdict
      {full, 0.5, 0, 0.0, false, 0.0, 0},         // no samples to judge
  };
  for (const auto& r : rows) {
    CAPTURE(r.cv);
    CAPTURE(r.taken_s);
    CAPTURE(r.budget_left_s);
    CHECK(extra_samples(r.rule, r.cv, r.taken, r.taken_s, r.budgeted, r.budget_left_s) == r.extra);
  }
  CHECK(extra_samples(full, std::nan(""), 50, 1.0, false, 0.0) == 0);  // no spread to judge
  // Full mode holds a set to 0.5% and fast mode to 1%.
  CHECK(extra_samples(extend_rule(true), 0.0051, 50, 0.25, false, 0.0) == 150);
  CHECK(extra_samples(extend_rule(true), 0.005, 50, 0.25, false, 0.0) == 0);
  CHECK(extra_samples(extend_rule(false), 0.0051, 5, 0.02, false, 0.0) == 0);
  CHECK(extra_samples(extend_rule(false), 0.011, 5, 0.02, false, 0.0) == 5);
}

TEST_CASE("a derived evaluation budget is 50 reference calls' time for every planned call, never below its floor") {
  struct Row {
    double floor_s, reference_s;
    int planned;
    double budget_s;
  };
  const Row rows[] = {
      {30.0, 0.00015, 423, 30.0},   // a warm relu in full mode: the floor
      {30.0, 0.021, 423, 444.15},   // the same relu's cold first run would have allowed minutes
      {30.0, 0.002, 423, 42.3},     // a 2 ms reference: above the floor
      {2.0, 0.002, 22, 2.2},
      {2.0, 0.0, 22, 2.0},
  };
  for (const auto& r : rows) {
    CAPTURE(r.reference_s);
    CAPTURE(r.planned);
    CHECK(derived_evaluation_budget(r.floor_s, r.reference_s, r.planned) == doctest::Approx(r.budget_s));
  }
}

TEST_CASE("custom work: a low share is no custom work only when the own kernels also ran shorter than writing the outputs") {
  struct Row {
    double share, own_us, output_bytes;
    bool none;
  };
  const double relu_out = 4096.0 * 393216 * 4;  // KernelBench's ReLU: 6.4 GB
  const double gemm_out = 1024.0 * 8192 * 4;    // level 2's GEMM epilogues: 32 MB, written in 3.4 us at the floor
  const Row rows[] = {
      {0.0003, 1.0, relu_out, true},     // a decoy on a scrap beside PyTorch's ReLU (H200: 0.03%)
      {0.0, 0.0, relu_out, true},        // nothing of its own ran
      {0.013, 36.0, gemm_out, false},    // a fused epilogue after cuBLAS's GEMM (H200: 1.3%)
      {0.006, 3.0, gemm_out, true},      // shorter than writing its output once: it did not write it
      {0.5, 0.1, relu_out, false},       // a share over the floor passes whatever its time
      {0.05, 0.0, relu_out, false},      // exactly at the floor
      {0.0499, 1.0, 0.0, false},         // no outputs to write: only the share speaks, and the time is not below 0
      {0.002, 2.0, 40e3, true},          // a decoy on a task of small outputs: under the least share whatever its time
      {0.0056, 30.0, gemm_out, false},   // the least honest epilogue measured (a Triton one, H200)
  };
  for (const auto& r : rows) {
    CAPTURE(r.share);
    CAPTURE(r.own_us);
    CHECK(no_custom_work(r.share, 0.05, r.own_us, r.output_bytes) == r.none);
  }
  CHECK_FALSE(no_custom_work(0.0, 0.0, 0.0, relu_out));  // a floor of 0 checks nothing
  CHECK(output_write_us(1e13) == doctest::Approx(1e6));
}

// The scale-out projection: worker starts serialised per host bound a host's candidates per second until workers
// are reused; hosts add their own starts; the coordinator's time per candidate bounds everything.
#include <doctest/doctest.h>

#include <stdexcept>

#include "cluster/scaleout_model.h"

using crucible::cluster::ScaleoutCosts;
using crucible::cluster::simulate_scaleout;

TEST_CASE("scale-out model: starts per host bound fresh workers, reuse lifts the bound, hosts add theirs") {
  struct Row {
    int hosts, gpus, per_worker;
    double start_s;
    double min_rate, max_rate;  // candidates/s; evaluation 0.5 s, so one GPU does 2
    int64_t contexts;  // spares, then one start per worker taken
  };
  const Row rows[] = {
      {1, 1, 1, 0.1, 1.99, 2.0, 3 + 512},        // starts hidden behind evaluations
      {1, 4, 1, 0.1, 7.9, 8.0, 12 + 512},        // 8 starts/s needed, 10/s available
      {1, 8, 1, 1.0 / 7, 6.9, 7.0, 24 + 512},    // 16 needed, 7 available: the host's ceiling
      {1, 8, 32, 1.0 / 7, 15.5, 16.0, 24 + 16},  // reused: 16 workers serve 32 each
      {2, 8, 1, 1.0 / 7, 13.8, 14.0, 48 + 512},  // each host has its own ceiling
  };
  for (const auto& r : rows) {
    CAPTURE(r.hosts);
    CAPTURE(r.gpus);
    CAPTURE(r.per_worker);
    ScaleoutCosts costs;
    costs.evaluation_s = 0.5;
    costs.context_start_s = r.start_s;
    costs.candidates_per_worker = r.per_worker;
    costs.coordinator_s = 0;
    const auto result = simulate_scaleout(costs, {r.hosts, r.gpus, 512});
    CHECK(result.candidates_per_s >= r.min_rate);
    CHECK(result.candidates_per_s <= r.max_rate);
    // A GPU that draws one candidate more than its share may take one worker more.
    CHECK(result.contexts >= r.contexts);
    CHECK(result.contexts <= r.contexts + r.hosts * r.gpus);
  }
}

TEST_CASE("scale-out model: the coordinator's time per candidate bounds any number of GPUs") {
  ScaleoutCosts costs;
  costs.evaluation_s = 0.5;
  costs.context_start_s = 0;
  costs.coordinator_s = 0.01;  // 100 candidates/s at most
  const auto result = simulate_scaleout(costs, {4, 8, 2000});
  CHECK(result.candidates_per_s <= 100.0);
  CHECK(result.candidates_per_s > 60.0);
  CHECK_THROWS_AS(simulate_scaleout(costs, {0, 8, 10}), std::invalid_argument);
}

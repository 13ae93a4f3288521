// How an evaluator node keeps each device busy: builds beside evaluations on GPUs, never on the cores that time.
#include <doctest/doctest.h>

#include <optional>
#include <stdexcept>

#include "cluster/compile_ahead.h"

using namespace crucible;

TEST_CASE("a node builds ahead on GPUs by default and never beside a CPU timing") {
  struct Row {
    const char* device;
    std::optional<int> asked;
    int pullers;
    bool beside;
  };
  const Row rows[] = {
      {"cuda:0", std::nullopt, 2, true},  // one evaluated, one built
      {"cuda:1", 0, 1, false},            // asked off: build, then evaluate, as before
      {"cuda:0", 3, 4, true},
      {"cpu", std::nullopt, 1, false},
      {"cpu", 0, 1, false},
  };
  for (const Row& row : rows) {
    INFO(row.device, " asked ", row.asked ? *row.asked : -1);
    const auto plan = cluster::pullers_for(eval::parse_device(row.device), row.asked);
    CHECK(plan.pullers == row.pullers);
    CHECK(plan.build_beside_evaluation == row.beside);
  }
  CHECK_THROWS_AS(cluster::pullers_for(eval::parse_device("cpu"), 1), std::invalid_argument);
  CHECK_THROWS_AS(cluster::pullers_for(eval::parse_device("cuda:0"), -1), std::invalid_argument);
}

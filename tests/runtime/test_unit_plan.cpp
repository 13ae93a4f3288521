// How modes cut experiments into units, and the dependencies that bound staleness and keep updates in order.
#include <doctest/doctest.h>

#include "experiment/experiment.h"
#include "modes/unit_plan.h"

using namespace crucible;

namespace {
experiment::Experiment with_mode(const std::string& extra) {
  return experiment::parse_experiment("[experiment]\nname = \"t\"\n" + extra + "[tasks]\nnames = [\"relu\"]\n", "t");
}
}  // namespace

TEST_CASE("grpo: batch_size groups per step, tasks in rotation, staleness bound in the dependencies") {
  auto e = with_mode("mode = \"grpo\"\n[grpo]\nsteps = 4\nbatch_size = 3\ngroup_size = 5\nmax_staleness = 1\n");
  auto units = modes::plan_units(e, {"a", "b"});
  REQUIRE(units.size() == 4);
  CHECK(units[0].name == "step=0");
  REQUIRE(units[1].groups.size() == 3);
  CHECK(units[1].groups[0].task == "b");  // 3 % 2: rotation goes on across steps
  CHECK(units[1].groups[0].n == 5);
  CHECK(units[0].generate_after == -1);
  CHECK(units[1].generate_after == -1);  // step 1 is sampled while step 0 trains
  CHECK(units[2].generate_after == 0);
  CHECK(units[3].train_after == 2);
  for (const auto& u : units) CHECK(u.train);

  auto strict = modes::plan_units(with_mode("mode = \"grpo\"\n[grpo]\nsteps = 3\nmax_staleness = 0\n"), {"a"});
  CHECK(strict[1].generate_after == 0);
  CHECK(strict[2].generate_after == 1);
}

TEST_CASE("best_of_n: one untrained unit per task, K samples in groups") {
  auto units = modes::plan_units(with_mode("mode = \"best_of_n\"\n[best_of_n]\nk = 20\ngroup_size = 8\n"), {"a", "b", "c"});
  REQUIRE(units.size() == 3);
  CHECK(units[2].name == "task=c");
  uint32_t total = 0;
  for (const auto& g : units[0].groups) total += g.n;
  CHECK(total == 20);
  CHECK(units[0].groups.size() == 3);
  CHECK_FALSE(units[0].train);
  CHECK(units[2].generate_after == 0);
}

TEST_CASE("ttt: steps per task, on-policy within a task, tasks in concurrent slots") {
  auto units = modes::plan_units(
      with_mode("mode = \"ttt\"\n[ttt]\nsteps = 3\nrollouts = 4\nconcurrent_tasks = 1\n"), {"a", "b"});
  REQUIRE(units.size() == 6);
  CHECK(units[4].name == "task=b/step=1");
  CHECK(units[1].generate_after == 0);
  CHECK(units[1].train_after == 0);
  CHECK(units[3].generate_after == 2);  // one slot: b starts when a is done
  auto two = modes::plan_units(
      with_mode("mode = \"ttt\"\n[ttt]\nsteps = 3\nrollouts = 4\nconcurrent_tasks = 2\n"), {"a", "b"});
  CHECK(two[3].generate_after == -1);  // two slots: both start at once
  CHECK(two[3].train_after == -1);
}

// Where a GPU worker is placed apart from the evaluator's thread: sysfs CPU lists and the choice of a core.
#include <doctest/doctest.h>

#include "crucible/eval/cpu_placement.h"

using namespace crucible::eval;

TEST_CASE("cpu lists as sysfs writes them parse into CPU numbers; anything else is empty") {
  struct Row {
    const char* text;
    std::set<int> cpus;
  };
  const Row rows[] = {
      {"0", {0}},   {"0-3", {0, 1, 2, 3}}, {"0,8", {0, 8}}, {"0-1,4-5\n", {0, 1, 4, 5}},
      {"3-3", {3}}, {"", {}},              {"a", {}},       {"1-", {}},
      {"3-1", {}},  {"1,,2", {}},          {"-1", {}},      {"0-99999", {}},
      {"2x", {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(parse_cpu_list(row.text) == row.cpus);
  }
}

TEST_CASE("a worker is placed on the next allowed CPU that is not the caller's or its SMT sibling") {
  // Eight CPUs, four cores: CPU i and i + 4 share a core.
  const std::function<std::set<int>(int)> smt = [](int cpu) { return std::set<int>{cpu % 4, cpu % 4 + 4}; };
  const std::function<std::set<int>(int)> alone = [](int cpu) { return std::set<int>{cpu}; };
  struct Row {
    int caller;
    std::vector<int> allowed;
    bool with_smt;
    std::optional<int> expected;
  };
  const Row rows[] = {
      {0, {0, 1, 2, 3, 4, 5, 6, 7}, true, 1},
      {3, {0, 1, 2, 3, 4, 5, 6, 7}, true, 4},  // 4 shares a core with 0, not with 3
      {7, {0, 1, 2, 3, 4, 5, 6, 7}, true, 0},  // wraps round
      {4, {0, 4, 5}, true, 5},                 // 0 is the caller's sibling
      {0, {0, 4}, true, std::nullopt},         // only the caller's core is allowed
      {1, {1}, false, std::nullopt},
      {1, {0, 1}, false, 0},
      {2, {5, 2, 0}, false, 5},  // unsorted input
  };
  for (const auto& row : rows) {
    CAPTURE(row.caller);
    CHECK(cpu_apart_from(row.caller, row.allowed, row.with_smt ? smt : alone) == row.expected);
  }
}

TEST_CASE("this machine's sibling list of a CPU holds the CPU itself") { CHECK(machine_siblings(0).count(0) == 1); }

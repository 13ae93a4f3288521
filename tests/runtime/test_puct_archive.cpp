// The PUCT archive of evaluated states: scores worked out by hand, visits along the lineage (failed children too),
// duplicates by code, and choices that spread over a batch.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "search/puct_archive.h"

using crucible::search::PuctArchive;
using crucible::search::PuctOptions;

TEST_CASE("puct: the score is Q + c P sqrt(1 + T) / (1 + n), by hand") {
  PuctArchive a(PuctOptions{1.0});
  a.add(1, std::nullopt, "a", 2.0);  // three fresh samples: T = 3
  a.add(2, std::nullopt, "b", 1.0);
  a.add(3, std::nullopt, "c", 0.0);  // failed
  // Rank prior over 3 states: weights 3, 2, 1 over 6. Q = subtree best / archive best (2).
  CHECK(a.score(1) == doctest::Approx(1.0 + (3.0 / 6) * std::sqrt(4.0)));
  CHECK(a.score(2) == doctest::Approx(0.5 + (2.0 / 6) * std::sqrt(4.0)));
  CHECK(a.score(3) == doctest::Approx(0.0 + (1.0 / 6) * std::sqrt(4.0)));
  CHECK(a.choose(1) == std::vector<uint64_t>{1});

  // Refining state 2 into a better kernel lifts 2's Q (its subtree) and counts a visit to 2.
  a.add(4, 2, "d", 4.0);
  CHECK(a.expansions() == 4);
  CHECK(a.visits(2) == 1);
  CHECK(a.visits(1) == 0);
  CHECK(a.best_in_subtree(2) == 4.0);
  // 4 states: weights 4 (state 4), 3 (state 1), 2 (state 2), 1 (state 3) over 10; the archive's best is 4.
  CHECK(a.score(2) == doctest::Approx(1.0 + (2.0 / 10) * std::sqrt(5.0) / 2.0));
  CHECK(a.score(1) == doctest::Approx(0.5 + (3.0 / 10) * std::sqrt(5.0)));
}

TEST_CASE("puct: visits run up the whole lineage, failed children count, duplicates add no state") {
  PuctArchive a;
  a.add(1, std::nullopt, "root", 1.0);
  a.add(2, 1, "child", 2.0);
  a.add(3, 2, "grandchild", 0.0);  // a failed refinement still counts as an expansion through 2 and 1
  CHECK(a.visits(2) == 1);
  CHECK(a.visits(1) == 2);
  CHECK(a.best_in_subtree(1) == 2.0);
  // The same code again: no new state, the held state's reward rises, and the expansion counts.
  CHECK(a.add(4, 3, "child", 3.0) == 2);
  CHECK(a.size() == 3);
  CHECK_FALSE(a.contains(4));
  CHECK(a.best_in_subtree(1) == 3.0);
  CHECK(a.visits(3) == 1);
  CHECK(a.visits(1) == 3);
  // A parent the archive does not hold (from before a resume) makes a fresh root.
  a.add(9, 77, "orphan", 0.5);
  CHECK(a.contains(9));
}

TEST_CASE("puct: a batch of choices spreads out, and leaves no provisional visit behind") {
  PuctArchive a(PuctOptions{2.0});
  for (uint64_t i = 1; i <= 4; ++i) a.add(i, std::nullopt, "s" + std::to_string(i), static_cast<double>(i));
  const auto picks = a.choose(4);
  REQUIRE(picks.size() == 4);
  CHECK(picks.front() == 4);  // the best state first
  CHECK(std::set<uint64_t>(picks.begin(), picks.end()).size() > 1);  // exploration moves later picks elsewhere
  for (uint64_t i = 1; i <= 4; ++i) CHECK(a.visits(i) == 0);
  CHECK(a.choose(1) == std::vector<uint64_t>{4});
  CHECK(PuctArchive().choose(3).empty());
}

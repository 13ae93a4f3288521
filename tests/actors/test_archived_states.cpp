// A resumed run's PUCT archive is read back from its records: records written by earlier versions still read, their
// reason codes as values.
#include <doctest/doctest.h>

#include "actors/run/archived_states.h"
#include "support.h"

using namespace crucible;

TEST_CASE("archived states read an earlier run's records, reason codes typed, the policy's failures left out") {
  test::ScratchDir seed("archived-states");
  // As an earlier version wrote them (one line each): a noisy but correct candidate, a reply the policy never gave,
  // a verdict with a code no longer given, and one with a code this build does not know.
  test::write_file(
      seed.path() / "candidates.jsonl",
      R"({"candidate_id":1,"step":0,"task":"relu","status":"correct","reasons":[{"code":"timing_noisy","detail":"spread 9%"}],"device":"cpu","speedup":1.5,"reward":1.2})"
      "\n"
      R"({"candidate_id":2,"step":0,"task":"relu","status":"parse_error","reasons":[{"code":"policy_error","detail":"server down"}],"device":"policy","reward":0})"
      "\n"
      R"({"candidate_id":3,"step":0,"task":"relu","status":"incorrect","reasons":[{"code":"timing_tampered","detail":"doorbell"}],"device":"cpu","reward":0})"
      "\n"
      R"({"candidate_id":4,"step":1,"task":"relu","status":"incorrect","reasons":[{"code":"from_a_later_version","detail":"new check"}],"device":"cuda:0","reward":0})"
      "\n");
  const auto states = node::archived_states(seed.path());
  REQUIRE(states.size() == 3);
  CHECK(states[0].candidate.id == 1);
  CHECK(states[0].verdict.status == eval::Status::correct);
  CHECK(states[0].verdict.has_reason(eval::ReasonCode::timing_noisy));
  CHECK(states[0].verdict.speedup == 1.5);
  CHECK(states[0].reward == 1.2);
  CHECK(states[1].candidate.id == 3);
  CHECK(states[1].verdict.has_reason(eval::ReasonCode::timing_tampered));
  CHECK(states[2].candidate.id == 4);
  REQUIRE(states[2].verdict.reasons.size() == 1);
  CHECK(states[2].verdict.reasons[0].code == eval::ReasonCode::unrecognized);
  CHECK(states[2].verdict.reasons[0].detail == "from_a_later_version: new check");
}

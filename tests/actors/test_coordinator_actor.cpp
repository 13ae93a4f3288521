// The coordinator actor under CAF's deterministic test coordinator: every message stepped one at a time, with the
// real generator (search policy), reward normalizer and telemetry (run_fixture.h).
#define CAF_SUITE coordinator_actor
#include <caf/test/dsl.hpp>
#include <caf/test/unit_test_impl.hpp>

#include "run_fixture.h"

CAF_TEST_FIXTURE_SCOPE(coordinator_actor_tests, Fixture)

CAF_TEST(a verdict counts only from the evaluator that holds the candidate and a group is scored once) {
  start_and_generate();
  const int64_t first = pull(self, 0);
  const int64_t second = pull(other, 0);
  CAF_REQUIRE_NOT_EQUAL(first, kRefused);
  CAF_REQUIRE_NOT_EQUAL(second, kRefused);
  CAF_REQUIRE_NOT_EQUAL(first, second);
  // `other` reports on the candidate `self` holds: discarded, recorded as a late result, nothing scored.
  other->send(coordinator, verdict(first, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // The holder's verdict counts; the group is not complete yet.
  self->send(coordinator, verdict(first, eval::Status::incorrect));
  expect((msg::VerdictReport), from(self).to(coordinator));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // A second verdict from the same evaluator for the same candidate: it no longer holds it.
  self->send(coordinator, verdict(first, eval::Status::correct));
  expect((msg::VerdictReport), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  // The last verdict completes the group: scored once, then the unit is committed and the run is over.
  other->send(coordinator, verdict(second, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect_group_committed();
  // Its records: the first candidate as its holder judged it (incorrect), not as the stranger or the repeat said.
  std::map<int64_t, std::string> status;
  for (const auto& r : run::read_jsonl(dir / "seed-1" / "candidates.jsonl"))
    status[r["candidate_id"].get<int64_t>()] = r["status"].get<std::string>();
  CAF_CHECK_EQUAL(status.size(), 2u);
  CAF_CHECK_EQUAL(status[first], "incorrect");
  CAF_CHECK_EQUAL(status[second], "correct");
}

CAF_TEST(reference timings an evaluator reports go with the next candidate of the task and the first report of a key stays) {
  const auto timing = [](std::string task, std::string key, double median_us) {
    return eval::SharedTiming{std::move(task), std::move(key), eval::TimingStats{5, median_us, median_us, median_us,
                                                                                 median_us, 0.001},
                              eval::RefreshChoice::whole};
  };
  start_and_generate();
  auto first = pull_request(self, 0);
  CAF_REQUIRE(first);
  CAF_CHECK(first->reference_timings.empty());  // nobody has timed relu yet
  // The report brings one usable entry, one for another task and one that is no measurement (median 0).
  auto report = verdict(static_cast<int64_t>(first->candidate.id), eval::Status::correct);
  report.reference_timings = {timing("relu", "relu|H100", 20.0), timing("gelu", "gelu|H100", 30.0),
                              timing("relu", "relu|H200", 0.0)};
  self->send(coordinator, report);
  expect((msg::VerdictReport), from(self).to(coordinator));
  auto second = pull_request(other, 0);
  CAF_REQUIRE(second);
  CAF_REQUIRE_EQUAL(second->reference_timings.size(), 1u);
  CAF_CHECK_EQUAL(second->reference_timings[0].key, "relu|H100");
  CAF_CHECK_EQUAL(second->reference_timings[0].reference.median_us, 20.0);
  CAF_CHECK(second->reference_timings[0].refresh == eval::RefreshChoice::whole);
  // A second report of the same key changes nothing (every evaluator that takes it uses the same numbers); the
  // group completes and the run ends as usual.
  auto last = verdict(static_cast<int64_t>(second->candidate.id), eval::Status::correct);
  last.reference_timings = {timing("relu", "relu|H100", 25.0)};
  other->send(coordinator, last);
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect_group_committed();
  CAF_CHECK_EQUAL(run::read_jsonl(dir / "seed-1" / "candidates.jsonl").size(), 2u);
}

CAF_TEST(a lost node gives its candidate back and its waiting evaluators are refused and its late verdict discarded) {
  const uint64_t session = 0x1234500000001ull;
  self->send(coordinator, msg::NodeJoined{session, "gpu-box", sys.node(), {}});
  expect((msg::NodeJoined), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  start_and_generate();
  const int64_t on_node = pull(other, session);  // the node's evaluator takes the first
  const int64_t here = pull(self, 0);           // the local one the second
  CAF_REQUIRE_NOT_EQUAL(on_node, kRefused);
  CAF_REQUIRE_NOT_EQUAL(here, kRefused);
  // A third evaluator of the node waits; then the node is lost.
  auto waiting = third->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cuda:1"), session);
  run();
  self->send(coordinator, msg::NodeLost{session, "no heartbeat for 2 s"});
  expect((msg::NodeLost), from(self).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  run();
  bool refused = false;
  waiting.receive([](msg::EvalRequest&) {},
                  [&](caf::error& err) { refused = msg::cluster_code(err) == msg::cluster_error::session_lost; });
  CAF_CHECK(refused);
  // A pull under the lost session is refused too; the local evaluator gets the node's candidate back.
  CAF_CHECK_EQUAL(pull(third, session), kRefused);
  self->send(coordinator, verdict(here, eval::Status::correct));
  expect((msg::VerdictReport), from(self).to(coordinator));
  CAF_CHECK_EQUAL(pull(self, 0), on_node);
  // The lost node's result arrives after all: discarded.
  other->send(coordinator, verdict(on_node, eval::Status::correct));
  expect((msg::VerdictReport), from(other).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  disallow((msg::ScoreRequest), from(coordinator).to(normalizer));
  self->send(coordinator, verdict(on_node, eval::Status::incorrect));
  expect((msg::VerdictReport), from(self).to(coordinator));
  expect((msg::ScoreRequest), from(coordinator).to(normalizer));
}

CAF_TEST(pulls after the run is over are refused with run_over) {
  start_and_generate();
  const int64_t a = pull(self, 0);
  const int64_t b = pull(other, 0);
  auto waiting = third->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cpu"), uint64_t{0});
  run();
  self->send(coordinator, verdict(a, eval::Status::correct));
  other->send(coordinator, verdict(b, eval::Status::correct));
  run();
  bool over = false;
  waiting.receive([](msg::EvalRequest&) {},
                  [&](caf::error& err) { over = msg::cluster_code(err) == msg::cluster_error::run_over; });
  CAF_CHECK(over);
}

CAF_TEST_FIXTURE_SCOPE_END()

// What the coordinator decides beside the order of work, without an actor system: candidate ids, PUCT's states,
// the monitor's view and the progress lines, and the teacher contexts of a unit. Tables of inputs and what they must
// give.
#include <doctest/doctest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/candidate_ids.h"
#include "coordinator/puct_states.h"
#include "coordinator/run_view.h"
#include "coordinator/teacher_contexts.h"
#include "coordinator/unit_pipeline.h"

using namespace crucible;
using namespace crucible::coordinator;

TEST_CASE("candidate ids: a group's turns take separate blocks, and the bounds keep every group's ids apart") {
  struct Row {
    uint64_t group;
    uint32_t turn;
    uint64_t first;
  };
  for (const auto& r : std::vector<Row>{{0, 0, 0}, {3, 0, 300000}, {3, 1, 301000}, {17, 15, 1715000}}) {
    INFO("group " << r.group << " turn " << r.turn);
    CHECK(first_candidate_id(r.group, r.turn) == r.first);
  }
  // The last id a group may use stays below the next group's first, with one turn or with many.
  CHECK(first_candidate_id(4) + kMaxGroupSamples - 1 < first_candidate_id(5));
  CHECK(first_candidate_id(4, kMaxTurns) + kMaxMultiTurnSamples - 1 < first_candidate_id(5));
  // A turn's last id stays below the next turn's first.
  CHECK(first_candidate_id(4, 2) + kMaxMultiTurnSamples - 1 < first_candidate_id(4, 3));
}

TEST_CASE("candidate ids: which group sizes and turns fit") {
  struct Row {
    int samples;
    uint32_t turns;
    bool fits;
  };
  for (const auto& r : std::vector<Row>{{1, 1, true},
                                        {99'999, 1, true},
                                        {100'000, 1, false},
                                        {999, 2, true},
                                        {1000, 2, false},
                                        {8, kMaxTurns, true},
                                        {8, kMaxTurns + 1, false},
                                        {0, 1, false},
                                        {8, 0, false}}) {
    INFO(r.samples << " samples, " << r.turns << " turns");
    CHECK(ids_fit(r.samples, r.turns) == r.fits);
  }
}

TEST_CASE("PUCT states: duplicates merge into the state held, children count there, policy errors are no state") {
  PuctStates<std::string> states(search::PuctOptions{});
  PuctBook book(search::PuctOptions{});
  struct Row {
    EvaluatedState added;
    bool new_state;
    std::optional<uint64_t> state_of;
  };
  const std::vector<Row> rows{
      {{1, -1, "relu", "code a", 1.0, false}, true, 1},
      {{2, -1, "relu", "code a", 0.5, false}, false, 1},   // the same code: merged into 1
      {{3, 2, "relu", "code b", 2.0, false}, true, 3},     // refines 2, which is state 1
      {{4, -1, "relu", "", 0.0, true}, false, std::nullopt},  // the server failed: neither a state nor a visit
      {{5, -1, "gelu", "code c", 0.0, false}, true, 5},
  };
  for (const auto& r : rows) {
    INFO("candidate " << r.added.id);
    CHECK(book.add(r.added) == r.new_state);
    CHECK(book.state_of(r.added.id) == r.state_of);
    states.add(r.added, "candidate " + std::to_string(r.added.id));
  }
  // What PUCT may improve on: the states held, never a merged duplicate; none for a task not seen yet.
  const auto chosen = states.choose("relu", 4);
  CHECK(chosen.size() == 4);
  for (const std::string* s : chosen) CHECK((*s == "candidate 1" || *s == "candidate 3"));
  CHECK(states.choose("softmax", 2).empty());
  CHECK(book.choose("gelu", 1) == std::vector<uint64_t>{5});
}

namespace {

modes::UnitPlan plan(std::string name, uint64_t group, int generate_after) {
  modes::UnitPlan p;
  p.name = std::move(name);
  p.groups = {{"relu", 2, group}};
  p.train = true;
  p.generate_after = generate_after;
  p.train_after = generate_after;
  return p;
}

}  // namespace

TEST_CASE("run view: the monitor reads units by phase, the newest started unit and what each actor is busy with") {
  UnitPipeline pipeline({plan("step=0", 0, -1), plan("step=1", 1, 0)}, {});
  const QueueCounts queues{2, 1, 5, 3, false};
  struct Row {
    const char* event;
    std::function<void()> apply;
    std::map<std::string, std::size_t> phases;
    std::string generator, optimizer, telemetry;
  };
  const std::vector<Row> rows{
      {"start", [&] { pipeline.start(); }, {{"generating", 1}, {"waiting", 1}}, "busy: step=0", "idle", "idle"},
      {"generated", [&] { pipeline.generated(0, 0, {1, 2}); }, {{"running", 1}, {"waiting", 1}}, "idle", "idle",
       "idle"},
      {"judged and scored",
       [&] {
         pipeline.judged(1);
         pipeline.judged(2);
         pipeline.scored(0, 0);
       },
       {{"training", 1}, {"waiting", 1}}, "idle", "busy: step=0", "idle"},
      {"trained", [&] { pipeline.trained(0); }, {{"committing", 1}, {"waiting", 1}}, "idle", "idle",
       "committing step=0"},
      {"committed", [&] { pipeline.committed(0); }, {{"committed", 1}, {"generating", 1}}, "busy: step=1", "idle",
       "idle"},
  };
  monitor::LiveSnapshot s;
  for (const auto& r : rows) {
    INFO(r.event);
    r.apply();
    describe_run(pipeline, queues, s);
    CHECK(s.units_by_phase == r.phases);
    CHECK(s.actors["generator"] == r.generator);
    CHECK(s.actors["optimizer"] == r.optimizer);
    CHECK(s.actors["telemetry"] == r.telemetry);
  }
  CHECK(s.units_total == 2);
  CHECK(s.units_committed == 1);
  CHECK(s.latest_unit == "step=1");
  CHECK(s.candidates_in_flight == 2);
  CHECK(s.compile_queue == 1);
  CHECK(s.evaluation_queue == 5);
  CHECK(s.evaluators_idle == 3);
  CHECK(s.actors["coordinator"] == "running");
  CHECK(s.actors["evaluators"] == "3 waiting for work, 5 candidates queued");
  describe_run(pipeline, QueueCounts{0, 0, 0, 0, true}, s);
  CHECK(s.actors["coordinator"] == "finished");
}

TEST_CASE("progress lines: the oldest unit in flight, its verdicts by status, at most once per interval") {
  struct Row {
    std::vector<std::optional<eval::Status>> verdicts;
    std::string line;
  };
  const std::string head = "[grpo seed 3] step=1 in progress: ";
  const std::vector<Row> rows{
      {{}, head + "0/0 evaluated |"},
      {{std::nullopt, std::nullopt}, head + "0/2 evaluated |"},
      {{eval::Status::incorrect, std::nullopt, eval::Status::correct, eval::Status::incorrect},
       head + "3/4 evaluated | correct 1 incorrect 2"},
      {{eval::Status::parse_error, eval::Status::compile_error}, head + "2/2 evaluated | compile_error 1 parse_error 1"},
  };
  for (const auto& r : rows) CHECK(unit_progress_line("grpo", 3, "step=1", r.verdicts) == r.line);

  UnitPipeline pipeline({plan("step=0", 0, -1), plan("step=1", 1, 0)}, {});
  CHECK_FALSE(oldest_unit_in_flight(pipeline));
  pipeline.start();
  CHECK(oldest_unit_in_flight(pipeline) == std::optional<UnitIndex>(0));

  ProgressClock off(false, 5.0), on(true, 5.0);
  on.reset(100.0);
  CHECK_FALSE(off.due(1e9));
  CHECK_FALSE(on.due(104.0));
  CHECK(on.due(105.0));
}

TEST_CASE("teacher contexts: decided group by group, one per candidate, fenced in the candidates' language") {
  eval::Verdict correct, wrong;
  correct.status = eval::Status::correct;
  correct.speedup = 2.0;
  wrong.status = eval::Status::incorrect;
  const std::map<uint64_t, policy::GroupAttempt> attempts{
      {1, {&correct, "def best(): pass", 2.0}}, {2, {&wrong, "def worse(): pass", 0.0}}, {3, {&wrong, "x", 0.0}}};
  const auto attempt_of = [&](uint64_t id) { return attempts.at(id); };
  const auto contexts = unit_teacher_contexts({{1, 2}, {3}}, attempt_of, policy::TeacherFeedback::successful_sibling,
                                              eval::CandidateLanguage::triton());
  REQUIRE(contexts.size() == 3);
  CHECK(contexts.at(1).empty());  // the best has no second correct sibling to learn from
  CHECK(contexts.at(2).find("```python\ndef best(): pass\n```") != std::string::npos);
  CHECK(contexts.at(3).empty());  // its group has no correct member: the other group's does not teach it
}

// The coordinator's decision core without an actor system: tables of events and the decisions they must produce.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "coordinator/reference_timings.h"
#include "coordinator/unit_pipeline.h"
#include "coordinator/work_queue.h"

using namespace crucible::coordinator;
using crucible::modes::GroupPlan;
using crucible::modes::UnitPlan;

namespace {

std::string show(const Decisions& d) {
  std::string out;
  for (const auto& a : d.assign) out += "assign c" + std::to_string(a.candidate) + "->e" + std::to_string(a.evaluator) + " ";
  for (const auto& r : d.refuse)
    out += std::string(r.why == Refusal::run_over ? "over" : "lost") + " e" + std::to_string(r.evaluator) + " ";
  for (auto c : d.requeued) out += "requeue c" + std::to_string(c) + " ";
  if (!out.empty()) out.pop_back();
  return out;
}

std::string show(const std::vector<Decision>& ds) {
  std::string out;
  for (const auto& d : ds) {
    if (auto* g = std::get_if<Generate>(&d)) out += "generate " + std::to_string(g->unit);
    else if (auto* x = std::get_if<Expand>(&d))
      out += "expand " + std::to_string(x->unit) + "/" + std::to_string(x->group);
    else if (auto* r = std::get_if<Refine>(&d))
      out += "refine " + std::to_string(r->unit) + "/" + std::to_string(r->group) + " turn " + std::to_string(r->turn);
    else if (auto* s = std::get_if<Score>(&d)) out += "score " + std::to_string(s->unit) + "/" + std::to_string(s->group);
    else if (auto* t = std::get_if<Train>(&d)) out += "train " + std::to_string(t->unit);
    else if (auto* c = std::get_if<Commit>(&d)) out += "commit " + std::to_string(c->unit);
    else out += "finish";
    out += "; ";
  }
  if (!out.empty()) out.resize(out.size() - 2);
  return out;
}

struct QueueStep {
  const char* event;
  std::function<Decisions(WorkQueue&)> apply;
  std::string expected;
};

void run_table(WorkQueue& q, const std::vector<QueueStep>& steps) {
  for (const auto& s : steps) {
    INFO(s.event);
    CHECK(show(s.apply(q)) == s.expected);
  }
}

}  // namespace

TEST_CASE("work queue: the oldest unit's candidates go first, to the evaluator that waits") {
  WorkQueue q;
  run_table(q, {
      {"offer unit 1", [](WorkQueue& w) { return w.offer(1, {10, 100}); }, ""},
      {"offer unit 0", [](WorkQueue& w) { return w.offer(0, {20, 200}); }, ""},
      {"pull e1", [](WorkQueue& w) { return w.pull(1, kLocalSession); }, "assign c20->e1"},
      {"pull e2", [](WorkQueue& w) { return w.pull(2, kLocalSession); }, "assign c10->e2"},
      {"pull e3 (nothing queued)", [](WorkQueue& w) { return w.pull(3, kLocalSession); }, ""},
      {"offer reaches the waiter", [](WorkQueue& w) { return w.offer(2, {30, 300}); }, "assign c30->e3"},
  });
}

TEST_CASE("work queue: a repeated source goes to the node that built it, a new one to a node that has none") {
  WorkQueue q;
  q.join(7, "a");
  q.join(8, "b");
  run_table(q, {
      {"offer h1", [](WorkQueue& w) { return w.offer(0, {1, 111}); }, ""},
      {"node a takes h1", [](WorkQueue& w) { return w.pull(70, 7); }, "assign c1->e70"},
  });
  REQUIRE(q.verdict(70, 1).accepted);
  run_table(q, {
      {"offer h2 then h1 again", [](WorkQueue& w) { w.offer(0, {2, 222}); return w.offer(0, {3, 111}); }, ""},
      {"node a skips the older h2 for its cached h1", [](WorkQueue& w) { return w.pull(70, 7); }, "assign c3->e70"},
      {"offer h1 once more, then h3", [](WorkQueue& w) { w.offer(0, {4, 111}); return w.offer(0, {5, 333}); }, ""},
      {"node b takes the oldest source no node has", [](WorkQueue& w) { return w.pull(80, 8); }, "assign c2->e80"},
      {"node b again: h1 is a's, h3 is nobody's", [](WorkQueue& w) { return w.pull(81, 8); }, "assign c5->e81"},
      {"node b once more: only a's h1 is left, so b takes it", [](WorkQueue& w) { return w.pull(82, 8); },
       "assign c4->e82"},
  });
}

TEST_CASE("work queue: a group offered while evaluators wait still goes to the nodes that built its sources") {
  WorkQueue q;
  q.join(7, "a");
  q.join(8, "b");
  // Each node built one source before.
  q.offer(0, {1, 111});
  CHECK(show(q.pull(70, 7)) == "assign c1->e70");
  q.offer(0, {2, 222});
  CHECK(show(q.pull(80, 8)) == "assign c2->e80");
  REQUIRE(q.verdict(70, 1).accepted);
  REQUIRE(q.verdict(80, 2).accepted);
  // Both wait (b's evaluator asked last) when a group of both sources arrives, b's source first in it.
  CHECK(show(q.pull(70, 7)) == "");
  CHECK(show(q.pull(80, 8)) == "");
  CHECK(show(q.offer(1, std::vector<Offered>{{3, 222}, {4, 111}})) == "assign c3->e80 assign c4->e70");
  // The other order of waiting and of the group: the same pairing.
  REQUIRE(q.verdict(80, 3).accepted);
  REQUIRE(q.verdict(70, 4).accepted);
  CHECK(show(q.pull(80, 8)) == "");
  CHECK(show(q.pull(70, 7)) == "");
  CHECK(show(q.offer(2, std::vector<Offered>{{5, 111}, {6, 222}})) == "assign c5->e70 assign c6->e80");
}

TEST_CASE("work queue: a node lost while holding work gives it back, its late verdict is discarded") {
  WorkQueue q;
  q.join(5, "gpu-box");
  run_table(q, {
      {"offer", [](WorkQueue& w) { w.offer(0, {1, 1}); return w.offer(0, {2, 2}); }, ""},
      {"the local evaluator asks first", [](WorkQueue& w) { return w.pull(1, kLocalSession); }, "assign c1->e1"},
      {"node evaluator takes c2", [](WorkQueue& w) { return w.pull(50, 5); }, "assign c2->e50"},
      {"a second node evaluator waits", [](WorkQueue& w) { return w.pull(51, 5); }, ""},
      {"node lost: c2 re-queued, the waiter refused", [](WorkQueue& w) { return w.node_lost(5); }, "lost e51 requeue c2"},
      {"lost twice: nothing more", [](WorkQueue& w) { return w.node_lost(5); }, ""},
      {"a pull under the lost session is refused", [](WorkQueue& w) { return w.pull(52, 5); }, "lost e52"},
      {"an unknown session too", [](WorkQueue& w) { return w.pull(60, 6); }, "lost e60"},
  });
  CHECK(q.verdict(1, 1).accepted);
  CHECK(show(q.pull(1, kLocalSession)) == "assign c2->e1");
  const auto late = q.verdict(50, 2);
  CHECK_FALSE(late.accepted);  // the lost node's result, arriving after all
  const auto ours = q.verdict(1, 2);
  CHECK(ours.accepted);
  CHECK(ours.session == kLocalSession);
  CHECK_FALSE(q.verdict(1, 2).accepted);  // a duplicate
}

TEST_CASE("work queue: a pull while holding, an evaluator that dies, and the end of the run") {
  WorkQueue q;
  run_table(q, {
      {"offer", [](WorkQueue& w) { return w.offer(0, {1, 1}); }, ""},
      {"e1 takes c1", [](WorkQueue& w) { return w.pull(1, kLocalSession); }, "assign c1->e1"},
      // Its pull timed out while c1 was on its way: it never got it, so c1 is handed out again.
      {"e1 pulls again while holding", [](WorkQueue& w) { return w.pull(1, kLocalSession); }, "assign c1->e1 requeue c1"},
      {"e1 dies holding c1", [](WorkQueue& w) { return w.evaluator_down(1); }, "requeue c1"},
      {"e2 gets it", [](WorkQueue& w) { return w.pull(2, kLocalSession); }, "assign c1->e2"},
      {"e3 waits", [](WorkQueue& w) { return w.pull(3, kLocalSession); }, ""},
      {"e3 dies waiting", [](WorkQueue& w) { return w.evaluator_down(3); }, ""},
      {"e4 waits", [](WorkQueue& w) { return w.pull(4, kLocalSession); }, ""},
      {"close: e4 refused", [](WorkQueue& w) { return w.close(); }, "over e4"},
      {"pulls after the end are refused", [](WorkQueue& w) { return w.pull(5, kLocalSession); }, "over e5"},
  });
  CHECK(q.held_by(2) == CandidateId{1});
  CHECK(q.waiting() == 0);
}

TEST_CASE("work queue: nodes warm different tasks, keep to them, and take another's task only when theirs is done") {
  // Best-of-N over two tasks: unit 0 is relu's sweep, unit 1 softmax's, all offered at once. A task's first
  // evaluation on a node builds its input pools and times its reference, so each node should start a different one.
  constexpr std::size_t relu = 1, softmax = 2;
  WorkQueue q;
  q.join(7, "a");
  q.join(8, "b");
  q.offer(0, std::vector<Offered>{{1, 11, relu}, {2, 12, relu}, {3, 13, relu}});
  q.offer(1, std::vector<Offered>{{4, 14, softmax}, {5, 15, softmax}});
  run_table(q, {
      {"a takes the oldest task", [](WorkQueue& w) { return w.pull(70, 7); }, "assign c1->e70"},
      {"b takes the task no node has", [](WorkQueue& w) { return w.pull(80, 8); }, "assign c4->e80"},
      {"a keeps to relu", [](WorkQueue& w) { return w.pull(71, 7); }, "assign c2->e71"},
      {"b keeps to softmax", [](WorkQueue& w) { return w.pull(81, 8); }, "assign c5->e81"},
      {"b's task is done: it helps with relu", [](WorkQueue& w) { return w.pull(82, 8); }, "assign c3->e82"},
      {"nothing left for a", [](WorkQueue& w) { return w.pull(72, 7); }, ""},
  });
}

TEST_CASE("work queue: with more nodes than tasks, each task is warmed by as few nodes as can be") {
  // Four nodes, two tasks: two nodes on each (not three on the oldest), so that each node's first evaluation, which
  // builds the task's input pools and may time its reference, is paid by two nodes per task.
  constexpr std::size_t relu = 1, softmax = 2;
  WorkQueue q;
  for (SessionId s = 1; s <= 4; ++s) q.join(s, "n" + std::to_string(s));
  std::vector<Offered> relus, softmaxes;
  for (CandidateId c = 1; c <= 8; ++c) relus.push_back({c, 100 + c, relu});
  for (CandidateId c = 11; c <= 18; ++c) softmaxes.push_back({c, 100 + c, softmax});
  q.offer(0, relus);
  q.offer(1, softmaxes);
  run_table(q, {
      {"n1 takes the oldest task", [](WorkQueue& w) { return w.pull(10, 1); }, "assign c1->e10"},
      {"n2 takes the task no node has", [](WorkQueue& w) { return w.pull(20, 2); }, "assign c11->e20"},
      {"n3: both tasks have a node; the oldest", [](WorkQueue& w) { return w.pull(30, 3); }, "assign c2->e30"},
      {"n4: relu has two nodes, softmax one", [](WorkQueue& w) { return w.pull(40, 4); }, "assign c12->e40"},
      {"n3 keeps to relu", [](WorkQueue& w) { return w.pull(31, 3); }, "assign c3->e31"},
      {"n4 keeps to softmax", [](WorkQueue& w) { return w.pull(41, 4); }, "assign c13->e41"},
  });
}

TEST_CASE("work queue: with one node, units go in order whatever tasks it has evaluated") {
  // A node stays on a task only among as many of the oldest lots as there are nodes: one node never lets a later
  // unit of a task it knows overtake an older unit of another task.
  constexpr std::size_t x = 1, y = 2;
  WorkQueue q;
  q.join(7, "a");
  q.offer(0, {1, 11, x});
  CHECK(show(q.pull(70, 7)) == "assign c1->e70");
  q.offer(1, {2, 12, y});
  q.offer(2, {3, 13, x});
  CHECK(show(q.pull(71, 7)) == "assign c2->e71");
  CHECK(show(q.pull(72, 7)) == "assign c3->e72");
}

TEST_CASE("work queue: a lost node's task is free again for the others") {
  constexpr std::size_t x = 1, y = 2;
  WorkQueue q;
  q.join(7, "a");
  q.join(8, "b");
  q.join(9, "c");
  q.offer(0, std::vector<Offered>{{1, 11, x}, {2, 12, x}});
  q.offer(1, std::vector<Offered>{{3, 13, y}, {4, 14, y}});
  CHECK(show(q.pull(70, 7)) == "assign c1->e70");
  CHECK(show(q.pull(80, 8)) == "assign c3->e80");
  CHECK(show(q.node_lost(7)) == "requeue c1");
  // c's evaluator: x is no live node's task any more, and it is the oldest lot.
  CHECK(show(q.pull(90, 9)) == "assign c1->e90");
}

TEST_CASE("work queue: the oldest candidate is passed over at most kWindow times") {
  // Both nodes keep to their tasks x and y; an older candidate of a task z that neither has is among the lots they
  // look at, but each pull finds a lot of its own task first. It must not wait for good.
  constexpr std::size_t x = 1, y = 2, z = 3;
  WorkQueue q;
  q.join(7, "a");
  q.join(8, "b");
  q.offer(5, {1, 11, x});
  CHECK(show(q.pull(70, 7)) == "assign c1->e70");
  q.offer(5, {2, 12, y});
  CHECK(show(q.pull(80, 8)) == "assign c2->e80");
  q.offer(0, {3, 13, z});
  std::vector<Offered> more;
  for (CandidateId c = 100; c < 100 + WorkQueue::kWindow + 5; ++c) more.push_back({c, c, x});
  q.offer(1, more);
  for (int i = 0; i < WorkQueue::kWindow; ++i) {
    const auto d = q.pull(1000 + static_cast<EvaluatorId>(i), 7);
    REQUIRE(d.assign.size() == 1);
    CHECK(d.assign[0].candidate == CandidateId(100 + i));
  }
  CHECK(show(q.pull(2000, 7)) == "assign c3->e2000");
  CHECK(show(q.pull(2001, 7)) == "assign c" + std::to_string(100 + WorkQueue::kWindow) + "->e2001");
}

TEST_CASE("compile queue: oldest unit first, workers refused once the run is over") {
  CompileQueue q;
  CHECK(show(q.offer(1, 10)) == "");
  CHECK(show(q.offer(0, 20)) == "");
  CHECK(show(q.pull(1)) == "assign c20->e1");
  CHECK(show(q.pull(2)) == "assign c10->e2");
  CHECK(show(q.pull(3)) == "");
  CHECK(show(q.pull(3)) == "");  // the same worker again (a pull that timed out): it waits once, not twice
  CHECK(show(q.offer(2, 30)) == "assign c30->e3");
  CHECK(show(q.offer(2, 31)) == "");
  CHECK(show(q.pull(5)) == "assign c31->e5");
  CHECK(show(q.pull(6)) == "");
  CHECK(show(q.close()) == "over e6");
  CHECK(show(q.pull(4)) == "over e4");
}

namespace {

// GRPO as modes::plan_units cuts it: step s is generated after step s-1-staleness is committed and trains after s-1.
std::vector<UnitPlan> grpo(int steps, int staleness, int groups) {
  std::vector<UnitPlan> out;
  uint64_t g = 0;
  for (int s = 0; s < steps; ++s) {
    UnitPlan u;
    u.name = "step=" + std::to_string(s);
    u.step = static_cast<uint64_t>(s);
    u.train = true;
    for (int k = 0; k < groups; ++k) u.groups.push_back(GroupPlan{"t", 2, g++});
    u.generate_after = std::max(-1, s - 1 - staleness);
    u.train_after = s - 1;
    out.push_back(u);
  }
  return out;
}

struct PipeStep {
  const char* event;
  std::function<std::vector<Decision>(UnitPipeline&)> apply;
  std::string expected;
};

void run_table(UnitPipeline& p, const std::vector<PipeStep>& steps) {
  for (const auto& s : steps) {
    INFO(s.event);
    CHECK(show(s.apply(p)) == s.expected);
  }
}

// Generation of unit u's only group (ids 10u, 10u+1), both judged.
std::vector<Decision> generate_and_judge(UnitPipeline& p, UnitIndex u) {
  const CandidateId a = 10 * u, b = 10 * u + 1;
  p.generated(u, p.plan(u).groups[0].group, {a, b});
  p.judged(a);
  return p.judged(b);
}

}  // namespace

TEST_CASE("pipeline: staleness 0 is strictly on-policy") {
  UnitPipeline p(grpo(3, 0, 1), {});
  run_table(p, {
      {"start", [](UnitPipeline& x) { return x.start(); }, "generate 0"},
      {"step 0 judged", [](UnitPipeline& x) { return generate_and_judge(x, 0); }, "score 0/0"},
      {"scored", [](UnitPipeline& x) { return x.scored(0, 0); }, "train 0"},
      {"trained", [](UnitPipeline& x) { return x.trained(0); }, "commit 0"},
      {"committed: step 1 may sample now", [](UnitPipeline& x) { return x.committed(0); }, "generate 1"},
      {"step 1 judged", [](UnitPipeline& x) { return generate_and_judge(x, 1); }, "score 1/1"},
      {"scored", [](UnitPipeline& x) { return x.scored(1, 1); }, "train 1"},
      {"trained", [](UnitPipeline& x) { return x.trained(1); }, "commit 1"},
      {"committed", [](UnitPipeline& x) { return x.committed(1); }, "generate 2"},
      {"step 2 judged", [](UnitPipeline& x) { return generate_and_judge(x, 2); }, "score 2/2"},
      {"scored", [](UnitPipeline& x) { return x.scored(2, 2); }, "train 2"},
      {"trained", [](UnitPipeline& x) { return x.trained(2); }, "commit 2"},
      {"all committed", [](UnitPipeline& x) { return x.committed(2); }, "finish"},
  });
}

TEST_CASE("pipeline: staleness 1 samples step t+1 while step t trains, and trains in order") {
  UnitPipeline p(grpo(3, 1, 1), {});
  run_table(p, {
      {"start: steps 0 and 1 both sample", [](UnitPipeline& x) { return x.start(); }, "generate 0; generate 1"},
      // Step 1 finishes scoring first: it may not train before step 0 is committed.
      {"step 1 judged first", [](UnitPipeline& x) { return generate_and_judge(x, 1); }, "score 1/1"},
      {"step 1 scored: waits for step 0", [](UnitPipeline& x) { return x.scored(1, 1); }, ""},
      {"step 0 judged", [](UnitPipeline& x) { return generate_and_judge(x, 0); }, "score 0/0"},
      {"step 0 scored", [](UnitPipeline& x) { return x.scored(0, 0); }, "train 0"},
      {"step 0 trained", [](UnitPipeline& x) { return x.trained(0); }, "commit 0"},
      {"step 0 committed: step 2 samples, step 1 trains", [](UnitPipeline& x) { return x.committed(0); },
       "train 1; generate 2"},
      {"step 1 trained", [](UnitPipeline& x) { return x.trained(1); }, "commit 1"},
      {"step 1 committed", [](UnitPipeline& x) { return x.committed(1); }, ""},
      {"step 2 judged", [](UnitPipeline& x) { return generate_and_judge(x, 2); }, "score 2/2"},
      {"step 2 scored", [](UnitPipeline& x) { return x.scored(2, 2); }, "train 2"},
      {"step 2 trained", [](UnitPipeline& x) { return x.trained(2); }, "commit 2"},
      {"done", [](UnitPipeline& x) { return x.committed(2); }, "finish"},
  });
}

TEST_CASE("pipeline: a group is scored once, when its last verdict arrives, late and duplicate verdicts are ignored") {
  UnitPipeline p(grpo(1, 0, 2), {});
  CHECK(show(p.start()) == "generate 0");
  CHECK(show(p.generated(0, 0, {1, 2})) == "");
  CHECK(p.phase(0) == Phase::generating);  // one of two groups in
  CHECK(show(p.generated(0, 1, {3, 4})) == "");
  CHECK(p.phase(0) == Phase::running);
  CHECK(show(p.judged(1)) == "");
  CHECK(show(p.judged(1)) == "");  // a duplicate of candidate 1's verdict
  CHECK(show(p.judged(3)) == "");
  CHECK(show(p.judged(2)) == "score 0/0");
  CHECK(show(p.judged(2)) == "");  // no second score
  CHECK(show(p.judged(99)) == "");  // a candidate of no unit
  CHECK(show(p.scored(0, 0)) == "");
  CHECK(show(p.judged(4)) == "score 0/1");
  CHECK(show(p.scored(0, 1)) == "train 0");
  CHECK(p.candidates(0) == std::vector<CandidateId>{1, 2, 3, 4});
  CHECK(show(p.trained(0)) == "commit 0");
  CHECK(show(p.committed(0)) == "finish");
  CHECK_FALSE(p.unit_of(1).has_value());  // forgotten once committed
  CHECK(show(p.judged(1)) == "");          // a verdict after the commit changes nothing
}

TEST_CASE("pipeline: a group the policy returned no samples for is scored at once, not waited for") {
  UnitPipeline p(grpo(1, 0, 2), {});
  CHECK(show(p.start()) == "generate 0");
  CHECK(show(p.generated(0, 0, {})) == "score 0/0");
  CHECK(show(p.generated(0, 1, {7})) == "");
  CHECK(show(p.scored(0, 0)) == "");
  CHECK(show(p.judged(7)) == "score 0/1");
  CHECK(show(p.scored(0, 1)) == "train 0");
}

TEST_CASE("pipeline: resumed in the middle of a run, committed units are skipped and their dependants start") {
  SUBCASE("staleness 1, steps 0 and 1 committed before") {
    UnitPipeline p(grpo(4, 1, 1), {"step=0", "step=1"});
    CHECK(p.committed_before() == 2);
    CHECK(show(p.start()) == "generate 2; generate 3");
    CHECK(show(generate_and_judge(p, 2)) == "score 2/2");
    CHECK(show(p.scored(2, 2)) == "train 2");
  }
  SUBCASE("every unit committed before: finished at once") {
    UnitPipeline p(grpo(2, 0, 1), {"step=0", "step=1"});
    CHECK(show(p.start()) == "finish");
    CHECK(show(p.start()) == "");
  }
  SUBCASE("a unit that does not train commits after scoring") {
    auto plans = grpo(2, 0, 1);
    for (auto& u : plans) u.train = false;
    UnitPipeline p(plans, {"step=0"});
    CHECK(show(p.start()) == "generate 1");
    CHECK(show(generate_and_judge(p, 1)) == "score 1/1");
    CHECK(show(p.scored(1, 1)) == "commit 1");
    CHECK(show(p.committed(1)) == "finish");
  }
}

TEST_CASE("pipeline: multi-turn groups are refined turn by turn, each turn judged first, then scored as a whole") {
  auto plans = grpo(1, 0, 2);
  for (auto& u : plans) u.turns = 3;
  UnitPipeline p(plans, {});
  run_table(p, {
      {"start", [](UnitPipeline& x) { return x.start(); }, "generate 0"},
      {"group 0, turn 0", [](UnitPipeline& x) { return x.generated(0, 0, {1, 2}); }, ""},
      {"group 1, turn 0", [](UnitPipeline& x) { return x.generated(0, 1, {3, 4}); }, ""},
      {"half of group 0 judged", [](UnitPipeline& x) { return x.judged(1); }, ""},
      {"group 0's turn 0 judged: refine it", [](UnitPipeline& x) { return x.judged(2); }, "refine 0/0 turn 1"},
      {"group 0, turn 1", [](UnitPipeline& x) { return x.generated(0, 0, {1001, 1002}); }, ""},
      {"a duplicate verdict of turn 0 decides nothing", [](UnitPipeline& x) { return x.judged(2); }, ""},
      {"group 0's turn 1", [](UnitPipeline& x) { x.judged(1001); return x.judged(1002); }, "refine 0/0 turn 2"},
      {"group 1's turn 0", [](UnitPipeline& x) { x.judged(3); return x.judged(4); }, "refine 0/1 turn 1"},
      {"group 0, turn 2", [](UnitPipeline& x) { return x.generated(0, 0, {2001, 2002}); }, ""},
      {"group 0's last turn judged: scored", [](UnitPipeline& x) { x.judged(2001); return x.judged(2002); },
       "score 0/0"},
      {"scored: group 1 still refines", [](UnitPipeline& x) { return x.scored(0, 0); }, ""},
      {"group 1, turn 1 returns nothing: scored at once", [](UnitPipeline& x) { return x.generated(0, 1, {}); },
       "score 0/1"},
      {"both scored: train", [](UnitPipeline& x) { return x.scored(0, 1); }, "train 0"},
  });
  CHECK(p.turns_generated(0, 0) == 3);
  CHECK(p.turn(0, 0, 1) == std::vector<CandidateId>{1001, 1002});
  CHECK(p.group(0, 0) == std::vector<CandidateId>{1, 2, 1001, 1002, 2001, 2002});
  CHECK(show(p.trained(0)) == "commit 0");
  CHECK(show(p.committed(0)) == "finish");
}

TEST_CASE("pipeline: sequential groups (PUCT) are generated one at a time, each after the one before is scored") {
  auto plans = grpo(1, 0, 3);
  plans[0].sequential_groups = true;
  plans[0].train = false;
  UnitPipeline p(plans, {});
  run_table(p, {
      {"start: the first group only", [](UnitPipeline& x) { return x.start(); }, "generate 0"},
      {"group 0 arrives", [](UnitPipeline& x) { return x.generated(0, 0, {1, 2}); }, ""},
      {"group 0 judged", [](UnitPipeline& x) { x.judged(1); return x.judged(2); }, "score 0/0"},
      {"group 0 scored: expand group 1", [](UnitPipeline& x) { return x.scored(0, 0); }, "expand 0/1"},
      {"group 1 arrives", [](UnitPipeline& x) { return x.generated(0, 1, {3, 4}); }, ""},
      {"group 1 judged", [](UnitPipeline& x) { x.judged(3); return x.judged(4); }, "score 0/1"},
      {"group 1 scored: expand group 2", [](UnitPipeline& x) { return x.scored(0, 1); }, "expand 0/2"},
      {"group 2 arrives", [](UnitPipeline& x) { return x.generated(0, 2, {5}); }, ""},
      {"group 2 judged", [](UnitPipeline& x) { return x.judged(5); }, "score 0/2"},
      {"all scored: commit", [](UnitPipeline& x) { return x.scored(0, 2); }, "commit 0"},
      {"committed", [](UnitPipeline& x) { return x.committed(0); }, "finish"},
  });
}

TEST_CASE("the reference-timing table keeps the first report of a key, for its own task, within its bound") {
  using crucible::eval::RefreshChoice;
  using crucible::eval::SharedTiming;
  using crucible::eval::TimingStats;
  const auto timing = [](std::string task, std::string key, double median_us) {
    return SharedTiming{std::move(task), std::move(key), TimingStats{5, median_us, median_us, median_us, median_us, 0.0},
                        RefreshChoice::whole};
  };
  struct Row {
    const char* event;
    std::string task;  // the task of the candidate whose verdict brought them
    std::vector<SharedTiming> reported;
    std::size_t added;
    std::size_t relu_known;
  };
  const std::vector<Row> rows = {
      {"nothing yet", "relu", {}, 0, 0},
      {"a first entry", "relu", {timing("relu", "relu|H100", 20.0)}, 1, 1},
      {"the same key again, other numbers", "relu", {timing("relu", "relu|H100", 99.0)}, 0, 1},
      {"another GPU model", "relu", {timing("relu", "relu|H200", 15.0)}, 1, 2},
      {"an entry for another task than the candidate's", "relu", {timing("gelu", "gelu|H100", 30.0)}, 0, 2},
      {"no measurement", "relu", {timing("relu", "relu|A100", 0.0)}, 0, 2},
      {"a repeat inside one report", "relu", {timing("relu", "relu|L4", 40.0), timing("relu", "relu|L4", 41.0)}, 1, 3},
  };
  ReferenceTimingTable table;
  for (const auto& row : rows) {
    CAPTURE(row.event);
    CHECK(table.learn(row.task, row.reported) == row.added);
    CHECK(table.for_task("relu").size() == row.relu_known);
  }
  CHECK(table.for_task("relu")[0].reference.median_us == 20.0);
  CHECK(table.for_task("gelu").empty());
  // A node cannot grow the table without bound.
  std::vector<SharedTiming> many;
  for (int i = 0; i < 1000; ++i) many.push_back(timing("softmax", "softmax|" + std::to_string(i), 10.0));
  CHECK(table.learn("softmax", many) == ReferenceTimingTable::kPerTask);
  CHECK(table.for_task("softmax").size() == ReferenceTimingTable::kPerTask);
}

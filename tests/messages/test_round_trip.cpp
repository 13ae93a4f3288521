// Every message type survives CAF's binary serialization: what goes out comes back field for field.
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <doctest/doctest.h>

#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

#include "messages/candidate.h"
#include "messages/coordination.h"
#include "crucible/eval/verdict_json.h"
#include "messages/evaluation.h"
#include "messages/records.h"
#include "messages/training.h"
#include "messages/type_ids.h"

using namespace crucible;
namespace msg = crucible::messages;

namespace {

template <class T>
std::vector<char> serialize(T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto err = sink(x);
  REQUIRE_FALSE(err);
  return buf;
}

template <class T>
T deserialize(const std::vector<char>& buf) {
  T y;
  caf::binary_deserializer source{nullptr, buf};
  auto err = source(y);
  REQUIRE_FALSE(err);
  return y;
}

// Serializing the copy that came back must give the same bytes: a field lost or garbled on the way shows.
template <class T>
T round_trip(const T& x) {
  auto bytes = serialize(x);
  T y = deserialize<T>(bytes);
  CHECK(serialize(y) == bytes);
  return y;
}

// With an actor system's own serializer, which is what actor handles (and CAF messages) need.
template <class T>
T round_trip_in(caf::actor_system& system, const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{system, buf};
  REQUIRE_FALSE(sink(x));
  T y;
  caf::binary_deserializer source{system, buf};
  REQUIRE_FALSE(source(y));
  return y;
}

msg::Candidate candidate() {
  msg::Candidate c;
  c.id = 42;
  c.task = "softmax";
  c.group = 7;
  c.index = 3;
  c.step = 5;
  c.policy_version = 11;
  c.output = "block=256 unroll=4";
  c.tokens = {1, 2};
  c.source = "#include <crucible/kernel.h>\n// ...\n";
  c.logprobs = {-0.5f, -1.25f, -0.125f};
  c.parse_error = "the reply has no complete fenced code block";
  return c;
}

}  // namespace

TEST_CASE("candidate and compile messages round-trip") {
  auto c = round_trip(candidate());
  CHECK(c.id == 42);
  CHECK(c.task == "softmax");
  CHECK(c.index == 3);
  CHECK(c.step == 5);
  CHECK(c.output == "block=256 unroll=4");
  CHECK(c.tokens == std::vector<int32_t>{1, 2});
  CHECK(c.logprobs == std::vector<float>{-0.5f, -1.25f, -0.125f});
  CHECK(c.parse_error == "the reply has no complete fenced code block");

  msg::CompileRequest request{42, "source text", eval::Device::cuda(1)};
  CHECK(round_trip(request).device == eval::Device::cuda(1));
  msg::CompileDone done{42, true, false, 1.25, "ab12", "warning: unused"};
  auto d = round_trip(done);
  CHECK(d.ok);
  CHECK(d.seconds == 1.25);
  CHECK(d.hash == "ab12");
}

TEST_CASE("evaluation messages round-trip, and a verdict crosses field for field") {
  const eval::SharedTiming timing{"relu", "relu|abc|NVIDIA H100|sm_90", eval::TimingStats{5, 41.5, 41.7, 41.0, 42.5, 0.012},
                                   eval::RefreshChoice::sampled};
  msg::EvalRequest request{candidate(), {timing}};
  auto r = round_trip(request);
  CHECK(r.candidate.source == candidate().source);
  REQUIRE(r.reference_timings.size() == 1);
  CHECK(r.reference_timings[0].key == timing.key);
  CHECK(r.reference_timings[0].reference.max_us == 42.5);
  CHECK(r.reference_timings[0].refresh == eval::RefreshChoice::sampled);

  eval::Verdict v;
  v.status = eval::Status::incorrect;
  v.reasons = {{eval::ReasonCode::skipped_work, "timed call 3: 12 elements wrong"}};
  v.compile.seconds = 0.9;
  eval::TimingStats t;
  t.median_us = 123.5;
  t.cv = 0.01;
  v.candidate_time = t;
  v.reference_time = t;
  v.speedup = 1.7;
  v.kernel_coverage = 0.93;
  v.seed = 5;
  v.trials = {{0, true, 1e-7, 2e-7, 0, 4096}, {1, false, 0.5, 1.0, 12, 4096}};
  v.stages.total_s = 0.25;
  v.device = eval::Device::cuda(1);
  v.mode = eval::EvalDepth::full;
  v.shapes = {{"n256_b2", 4600.5, 2033.0, 0.006, 0.002}, {"n1024_b1", 103217.8, 34207.9, 0.001, 0.003}};
  auto sent = msg::report(42, v);
  sent.reference_timings = {timing};
  auto report = round_trip(sent);
  CHECK(report.candidate_id == 42);
  REQUIRE(report.reference_timings.size() == 1);
  CHECK(report.reference_timings[0].reference.median_us == 41.5);
  const auto& back = report.verdict;
  CHECK(back.status == eval::Status::incorrect);
  CHECK(back.has_reason(eval::ReasonCode::skipped_work));
  CHECK(back.device == eval::Device::cuda(1));
  CHECK(back.mode == eval::EvalDepth::full);
  REQUIRE(back.candidate_time.has_value());
  CHECK(back.candidate_time->median_us == 123.5);
  CHECK(back.speedup.value_or(0.0) == 1.7);
  CHECK(back.kernel_coverage.value_or(0.0) == 0.93);
  CHECK_FALSE(back.gflops.has_value());
  CHECK(back.seed == 5);
  REQUIRE(back.trials.size() == 2);
  CHECK(back.trials[1].mismatched == 12);
  CHECK(back.stages.total_s == 0.25);
  REQUIRE(back.shapes.size() == 2);
  CHECK(back.shapes[1].name == "n1024_b1");
  CHECK(back.shapes[1].reference_cv == 0.003);
  // The verdict's JSON is written from the typed value on arrival, so it is the evaluator's own, field for field.
  CHECK(eval::to_json(back, -1) == eval::to_json(v, -1));

  eval::Verdict bare;  // no times, no speedup: they stay absent
  bare.status = eval::Status::compile_error;
  auto none = round_trip(msg::report(1, bare)).verdict;
  CHECK_FALSE(none.candidate_time.has_value());
  CHECK_FALSE(none.speedup.has_value());
  CHECK_FALSE(none.device.has_value());  // never evaluated on a device
  // Texts a candidate chose arrive as valid UTF-8.
  eval::Verdict odd;
  odd.reasons = {{eval::ReasonCode::forbidden_import, "symbol \xFF\xFE"}};
  CHECK(msg::report(2, odd).verdict.reasons[0].detail == "symbol \xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK_THROWS_AS(eval::parse_status("great"), std::invalid_argument);
  CHECK(eval::parse_status("parse_error") == eval::Status::parse_error);
}

TEST_CASE("training messages round-trip") {
  msg::TrainBatch batch;
  batch.step = 4;
  batch.samples.resize(2);
  batch.samples[0].task = "relu";
  batch.samples[0].tokens = {0, 2};
  batch.samples[0].logprobs = {-0.1f, -2.0f};
  batch.samples[0].policy_version = 3;
  batch.samples[0].teacher_context = "A correct kernel for this task";
  batch.samples[1].task = "gelu";
  batch.samples[1].tokens = {1, 1};
  batch.advantages = {-0.25, 0.75};
  auto b = round_trip(batch);
  REQUIRE(b.samples.size() == 2);
  REQUIRE(b.advantages.size() == 2);
  CHECK(b.advantages[1] == 0.75);
  CHECK(b.samples[0].policy_version == 3);
  CHECK(b.samples[0].tokens == std::vector<int32_t>{0, 2});
  CHECK(b.samples[0].teacher_context == "A correct kernel for this task");
  CHECK(b.samples[1].task == "gelu");
  msg::PolicyPublished published{12, 4, 0.031, R"({"version":12})", {{"relu", 0.5, 0.0, 1.0, 0.0, 2.0, 8, 512, 1}}};
  auto p = round_trip(published);
  CHECK(p.version == 12);
  CHECK(p.snapshot == R"({"version":12})");
  REQUIRE(p.metrics.size() == 1);
  CHECK(p.metrics[0].adapter == "relu");
  CHECK(p.metrics[0].loss == 0.5);
  CHECK(p.metrics[0].dropped_sequences == 1);
  REQUIRE(p.metrics[0].kl);
  CHECK(*p.metrics[0].kl == 0.0);
  // A KL that was not measured stays unmeasured, not zero.
  published.metrics[0].kl.reset();
  CHECK_FALSE(round_trip(published).metrics.at(0).kl);
}

TEST_CASE("coordination messages round-trip") {
  msg::GenerateRequest generate{"step=3", 3, "relu", 17, 8, 1700000};
  auto g = round_trip(generate);
  CHECK(g.unit == "step=3");
  CHECK(g.n == 8);
  CHECK(g.first_id == 1700000);

  msg::Generated generated{"step=3", {candidate(), candidate()}, 10.5, 10.75};
  auto gen = round_trip(generated);
  REQUIRE(gen.candidates.size() == 2);
  CHECK(gen.candidates[1].source == candidate().source);
  CHECK(gen.finished_at == 10.75);

  eval::Verdict v;
  v.status = eval::Status::correct;
  v.speedup = 2.0;
  msg::ScoreRequest score{"step=3", "relu", 17, {v, v}};
  auto s = round_trip(score);
  REQUIRE(s.verdicts.size() == 2);
  CHECK(s.verdicts[1].status == eval::Status::correct);
  CHECK(s.verdicts[0].speedup == 2.0);

  msg::ScoredGroup scored{"step=3", 17, {1.0, 2.0}, {-0.7, 0.7}};
  CHECK(round_trip(scored).advantages == std::vector<double>{-0.7, 0.7});

  // The records telemetry writes travel typed, optional parts included.
  msg::CandidateRecord record;
  record.unit = "step=3";
  record.candidate = candidate();
  record.verdict = msg::report(candidate().id, v);
  record.advantage = -0.5;
  record.reward = 1.25;
  auto r = round_trip(record);
  CHECK(r.unit == "step=3");
  CHECK(r.candidate.source == candidate().source);
  REQUIRE(r.verdict);
  CHECK(r.verdict->verdict.speedup == 2.0);
  CHECK_FALSE(r.compile);
  REQUIRE(r.advantage);
  CHECK(*r.advantage == -0.5);

  msg::CommitUnit commit;
  commit.unit.name = "step=3";
  commit.unit.train = true;
  commit.unit.train_metrics = {{"", 0.5, 0.01, 1.2, 0.1, 0.9, 8, 4096, 0}};
  commit.source_extension = "cu";
  commit.policy_snapshot = R"({"version":4})";
  commit.progress = {"grpo", 4, 16, 12.5, 128};
  auto c = round_trip(commit);
  CHECK(c.policy_snapshot == R"({"version":4})");
  CHECK(c.unit.train_metrics.at(0).tokens == 4096);
  CHECK(c.progress.units_total == 16);

  msg::RunOutcome outcome{true, "6 units committed", 6, 48};
  auto o = round_trip(outcome);
  CHECK(o.ok);
  CHECK(o.candidates == 48);
}

TEST_CASE("every message type has a registered type id, so an actor system can send it over the network") {
  caf::actor_system_config config;
  config.add_message_types<caf::id_block::crucible>();
  caf::actor_system system{config};
  CHECK(caf::id_block::crucible::end - caf::id_block::crucible::begin == 23);
  for (const char* name : {"crucible::messages::Candidate", "crucible::messages::EvalRequest",
                           "crucible::messages::VerdictReport", "crucible::messages::TrainBatch",
                           "crucible::messages::RunOutcome", "crucible::messages::CommitUnit",
                           "crucible::messages::NodeHello", "crucible::messages::JoinAccepted",
                           "crucible::messages::NodeHeartbeat", "crucible::messages::NodeLost"}) {
    CAPTURE(name);
    CHECK(system.types().make_value(name) != nullptr);
  }
  // A message crosses as bytes with the actor system's own serializer and comes back equal.
  auto back = round_trip_in(system, caf::make_message(candidate()));
  REQUIRE(back.match_elements<msg::Candidate>());
  CHECK(back.get_as<msg::Candidate>(0).source == candidate().source);
}

TEST_CASE("cluster messages round-trip: a node's join, its heartbeat with log lines, and its loss") {
  msg::NodeHello hello{msg::kClusterProtocol, "gpu-a", std::string(64, 'a'),
                       {{eval::Device::cuda(3), "NVIDIA H200", 150000000000ull, 9, 0, 132}}};
  auto h = round_trip(hello);
  CHECK(h.node == "gpu-a");
  REQUIRE(h.devices.size() == 1);
  CHECK(h.devices[0].device == eval::Device::cuda(3));
  CHECK(h.devices[0].cc_major == 9);
  CHECK(h.devices[0].multiprocessors == 132);
  CHECK(round_trip(msg::JoinChallenge{"n", "p"}).proof == "p");
  CHECK(round_trip(msg::NodeProof{"gpu-a", "proof"}).node == "gpu-a");
  // The accepted join carries the coordinator's handle: it needs an actor system to cross.
  caf::actor_system_config config;
  config.add_message_types<caf::id_block::crucible>();
  caf::actor_system system{config};
  msg::JoinAccepted accepted;
  accepted.session = 7;
  accepted.run = "sweep seed 1";
  accepted.eval = {eval::Backend::cuda, eval::CandidateKind::triton, eval::EvalDepth::full, eval::Launches::queued, "cpu",
                   3, 20, 5.0};
  accepted.eval.forbid_torch_ops = true;
  accepted.tasks = {{"relu", "name = \"relu\"\n"}};
  accepted.heartbeat_s = 0.5;
  accepted.last_run = false;
  auto a = round_trip_in(system, accepted);
  CHECK(a.session == 7);
  CHECK(a.eval.timing_trials == 20);
  CHECK(a.eval.backend == eval::Backend::cuda);
  CHECK(a.eval.mode == eval::EvalDepth::full);
  CHECK(a.eval.launches == eval::Launches::queued);
  CHECK(a.eval.kind == eval::CandidateKind::triton);
  CHECK(a.eval.forbid_torch_ops);  // [eval] torch_ops reaches evaluator nodes
  CHECK(a.tasks.at(0).toml == "name = \"relu\"\n");
  CHECK_FALSE(a.last_run);
  auto beat = round_trip(msg::NodeHeartbeat{7, {{"evaluator.cuda:0", "2024-05-01T12:00:00.000 info  [gpu-a/x] y"}}});
  CHECK(beat.lines.at(0).component == "evaluator.cuda:0");
  CHECK(round_trip(msg::NodeLost{7, "no heartbeat for 10 s"}).reason == "no heartbeat for 10 s");
  msg::ClusterEvent lost;
  lost.kind = msg::ClusterEventKind::lost;
  lost.node = "gpu-a";
  lost.requeued = {3, 4};
  auto l = round_trip(lost);
  CHECK(l.kind == msg::ClusterEventKind::lost);
  CHECK(l.requeued == std::vector<uint64_t>{3, 4});
}

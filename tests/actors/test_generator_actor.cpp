// The rollout generator under CAF's deterministic test coordinator, with the real search policy: requests that
// arrive together wait for one flush and are sampled as one batch; each sample comes back tagged with its place
// (ids, group, index, turn, trajectory); refinements answer at once; a bad request is refused without sampling.
#define CAF_SUITE generator_actor
#include <caf/test/dsl.hpp>

#include "run_fixture.h"

namespace {

struct GeneratorFixture : test_coordinator_fixture<Config> {
  generator_actor generator;

  GeneratorFixture() {
    auto task = tasks::load_task_file(fs::path(CRUCIBLE_SOURCE_DIR) / "configs/tasks/relu.toml");
    policy::SearchPolicyOptions options;
    options.language = eval::CandidateLanguage::cpp();
    auto g = std::make_shared<GeneratorSetup>();
    g->policy = std::make_unique<policy::SearchPolicy>(1, options);
    g->tasks[task.name] = task;
    g->leases = std::make_shared<devices::DeviceLeases>();
    generator = sys.spawn(rollout_generator, g);
    run();
  }

  // The answer to a request sent earlier from `self`, once every message is delivered.
  template <class Handle>
  std::optional<msg::Generated> answer(Handle& handle, std::string* error = nullptr) {
    std::optional<msg::Generated> out;
    handle.receive([&](msg::Generated& g) { out = std::move(g); },
                   [&](caf::error& e) {
                     if (error) *error = sys.render(e);
                   });
    return out;
  }
};

msg::GenerateRequest generate_request(std::string unit, uint64_t group, uint32_t n) {
  return {std::move(unit), 3, "relu", group, n, group * 100000};
}

void check_tagged(const msg::Generated& g, const msg::GenerateRequest& r) {
  CAF_REQUIRE_EQUAL(g.candidates.size(), r.n);
  CAF_CHECK_EQUAL(g.unit, r.unit);
  for (uint32_t i = 0; i < r.n; ++i) {
    const auto& c = g.candidates[i];
    CAF_CHECK_EQUAL(c.id, r.first_id + i);
    CAF_CHECK_EQUAL(c.index, i);
    CAF_CHECK_EQUAL(c.group, r.group);
    CAF_CHECK_EQUAL(c.step, r.step);
    CAF_CHECK_EQUAL(c.task, "relu");
    CAF_CHECK_EQUAL(c.trajectory, c.id);  // a first turn starts its own trajectory
    CAF_CHECK_EQUAL(c.parent, -1);
    CAF_CHECK(!c.source.empty());
    CAF_CHECK(!c.tokens.empty());
  }
}

}  // namespace

CAF_TEST_FIXTURE_SCOPE(generator_actor_tests, GeneratorFixture)

CAF_TEST(requests that arrive together are answered after one flush and each gets its own samples tagged) {
  const auto a = generate_request("step=3", 7, 2), b = generate_request("step=3", 8, 3);
  auto first = self->request(generator, caf::infinite, a);
  auto second = self->request(generator, caf::infinite, b);
  expect((msg::GenerateRequest), from(self).to(generator));
  expect((msg::GenerateRequest), from(self).to(generator));
  // Nothing is sampled before the batching delay is over: both wait for the same flush.
  disallow((msg::Generated), from(generator).to(self));
  CAF_CHECK(sched.has_pending_timeout());
  trigger_timeouts();
  expect((flush_atom), to(generator));  // the flush answers both (received below: the test's own mailbox)
  CAF_CHECK(!sched.has_pending_timeout());  // one flush served both
  auto ga = answer(first), gb = answer(second);
  CAF_REQUIRE(ga && gb);
  check_tagged(*ga, a);
  check_tagged(*gb, b);
  CAF_CHECK(ga->started_at == gb->started_at);  // one policy call for the batch
}

CAF_TEST(a request after a flush starts a batch of its own) {
  const auto a = generate_request("step=1", 1, 1), b = generate_request("step=2", 2, 2);
  auto first = self->request(generator, caf::infinite, a);
  expect((msg::GenerateRequest), from(self).to(generator));
  trigger_timeouts();
  expect((flush_atom), to(generator));
  auto second = self->request(generator, caf::infinite, b);
  expect((msg::GenerateRequest), from(self).to(generator));
  CAF_CHECK(sched.has_pending_timeout());
  trigger_timeouts();
  expect((flush_atom), to(generator));
  auto ga = answer(first), gb = answer(second);
  CAF_REQUIRE(ga && gb);
  check_tagged(*ga, a);
  check_tagged(*gb, b);
}

CAF_TEST(a refinement is answered at once each sample continuing its previous candidates trajectory) {
  auto first = self->request(generator, caf::infinite, generate_request("step=3", 7, 2));
  expect((msg::GenerateRequest), from(self).to(generator));
  trigger_timeouts();
  expect((flush_atom), to(generator));
  auto turn0 = answer(first);
  CAF_REQUIRE(turn0);
  auto refine = generate_request("step=3", 7, 2);
  refine.turn = 1;
  refine.first_id = 7 * 100000 + 1000;
  refine.previous = turn0->candidates;
  eval::Verdict wrong;
  wrong.status = eval::Status::incorrect;
  refine.verdicts = {wrong, wrong};
  auto handle = self->request(generator, caf::infinite, refine);
  expect((msg::GenerateRequest), from(self).to(generator));  // answered as it is handled: no batching delay
  CAF_CHECK(!sched.has_pending_timeout());
  auto turn1 = answer(handle);
  CAF_REQUIRE(turn1);
  CAF_REQUIRE_EQUAL(turn1->candidates.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& c = turn1->candidates[i];
    CAF_CHECK_EQUAL(c.id, refine.first_id + i);
    CAF_CHECK_EQUAL(c.turn, 1u);
    CAF_CHECK_EQUAL(c.trajectory, turn0->candidates[i].trajectory);
    CAF_CHECK_EQUAL(c.parent, static_cast<int64_t>(turn0->candidates[i].id));
  }
}

CAF_TEST(an unknown task and a refinement without one verdict per candidate are refused without sampling) {
  auto unknown = generate_request("step=3", 7, 2);
  unknown.task = "no-such-task";
  auto a = self->request(generator, caf::infinite, unknown);
  expect((msg::GenerateRequest), from(self).to(generator));
  CAF_CHECK(!sched.has_pending_timeout());
  run();
  std::string error;
  CAF_CHECK(!answer(a, &error));
  CAF_CHECK(error.find("unknown task no-such-task") != std::string::npos);

  auto uneven = generate_request("step=3", 7, 1);
  uneven.turn = 1;
  uneven.previous.resize(1);
  auto b = self->request(generator, caf::infinite, uneven);
  expect((msg::GenerateRequest), from(self).to(generator));
  run();
  error.clear();
  CAF_CHECK(!answer(b, &error));
  CAF_CHECK(error.find("one verdict per previous candidate") != std::string::npos);
}

CAF_TEST_FIXTURE_SCOPE_END()

// The gateway under CAF's deterministic test coordinator, in front of a real coordinator (run_fixture.h): a node
// joins only after both sides prove the secret, the coordinator learns of each session it gets and each it loses,
// heartbeats carry a node's log lines into the run's logs, and nodes hear when the run is over. The test's scoped
// actor `other` plays the node's side of the protocol, as crucible node does.
#define CAF_SUITE gateway_actor
#include <caf/test/dsl.hpp>

#include <fstream>
#include <iterator>

#include "actors/gateway.h"
#include "cluster/join_proof.h"
#include "messages/cluster_error.h"
#include "run_fixture.h"

namespace {

const std::string kSecret = "a shared secret of the test, long enough to be one";

struct GatewayFixture : Fixture {
  gateway_actor gateway;

  GatewayFixture() {
    GatewaySetup g;
    g.secret = kSecret;
    g.coordinator = coordinator;
    g.run = "dsl seed 1";
    g.eval = e.eval;
    g.tasks = {{"relu", "name = \"relu\""}};
    g.timeout_s = 1e6;  // no session goes silent within a test: losses here are the test's own doing
    g.log_dir = dir / "logs";
    gateway = spawn_gateway(sys, std::move(g));
    sched.run();
  }

  // The gateway's liveness check re-arms itself for ever: messages are delivered here without firing timeouts
  // (the fixture's run() would fire them until none is left), and the gateway stops before the fixture runs down.
  ~GatewayFixture() override {
    caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    sched.run();
  }

  msg::NodeHello hello(std::string node, std::string nonce) {
    return {msg::kClusterProtocol, std::move(node), std::move(nonce), {{eval::Device::cpu(), "test CPU", 0, 0, 0, 2}}};
  }

  // What the gateway answers a request from `other`: the reply, or the error's cluster code and text.
  template <class Reply, class Request>
  std::optional<Reply> ask(Request request, msg::cluster_error* code = nullptr, std::string* text = nullptr) {
    auto handle = other->request(gateway, caf::infinite, std::move(request));
    sched.run();
    std::optional<Reply> out;
    handle.receive([&](Reply& r) { out = std::move(r); },
                   [&](caf::error& e) {
                     if (code) *code = msg::cluster_code(e);
                     if (text) *text = sys.render(e);
                   });
    return out;
  }

  // The node's side of a join: its hello, a check of the coordinator's proof, then its own proof.
  std::optional<msg::JoinAccepted> join(const std::string& node, const std::string& secret = kSecret) {
    const std::string nonce = cluster::fresh_nonce();
    auto challenge = ask<msg::JoinChallenge>(hello(node, nonce));
    if (!challenge) return std::nullopt;
    CAF_CHECK(cluster::proofs_match(
        cluster::join_proof(kSecret, cluster::Role::coordinator, nonce, challenge->nonce, node), challenge->proof));
    const auto proof = cluster::join_proof(secret, cluster::Role::node, challenge->nonce, nonce, node);
    return ask<msg::JoinAccepted>(msg::NodeProof{node, proof});
  }
};

}  // namespace

CAF_TEST_FIXTURE_SCOPE(gateway_actor_tests, GatewayFixture)

CAF_TEST(a node that proves the secret joins its heartbeats carry its log lines and it hears when the run is over) {
  const std::string nonce = cluster::fresh_nonce();
  auto challenge = ask<msg::JoinChallenge>(hello("gpu-box", nonce));
  CAF_REQUIRE(challenge);
  CAF_CHECK(cluster::proofs_match(
      cluster::join_proof(kSecret, cluster::Role::coordinator, nonce, challenge->nonce, "gpu-box"), challenge->proof));
  const auto proof = cluster::join_proof(kSecret, cluster::Role::node, challenge->nonce, nonce, "gpu-box");
  auto handle = other->request(gateway, caf::infinite, msg::NodeProof{"gpu-box", proof});
  expect((msg::NodeProof), from(other).to(gateway));
  // The coordinator is told (and records it) before the node hears it is accepted.
  expect((msg::NodeJoined), from(gateway).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  sched.run();
  std::optional<msg::JoinAccepted> accepted;
  handle.receive([&](msg::JoinAccepted& a) { accepted = std::move(a); }, [](caf::error&) {});
  CAF_REQUIRE(accepted);
  CAF_CHECK_NOT_EQUAL(accepted->session, 0u);
  CAF_CHECK_EQUAL(accepted->run, "dsl seed 1");
  CAF_REQUIRE_EQUAL(accepted->tasks.size(), 1u);
  CAF_CHECK(accepted->coordinator == caf::actor_cast<caf::strong_actor_ptr>(coordinator));

  msg::cluster_error code{};
  CAF_CHECK(ask<caf::ok_atom>(msg::NodeHeartbeat{accepted->session, {{"evaluator", "hello from the node"}}}, &code));
  std::string logged;
  for (const auto& f : fs::directory_iterator(dir / "logs" / "nodes" / "gpu-box"))
    logged += std::string(std::istreambuf_iterator<char>(std::ifstream(f.path()).rdbuf()), {});
  CAF_CHECK(logged.find("hello from the node") != std::string::npos);
  CAF_CHECK(!ask<caf::ok_atom>(msg::NodeHeartbeat{accepted->session + 1, {}}, &code));
  CAF_CHECK(code == msg::cluster_error::session_unknown);

  // The run is over: the node hears it, named by its session, and nobody joins any more.
  auto over = self->request(gateway, caf::infinite, over_atom_v);
  sched.run();
  over.receive([](caf::ok_atom) {}, [](caf::error&) { CAF_FAIL("over_atom refused"); });
  uint64_t told = 0;
  other->receive([&](over_atom, uint64_t session) { told = session; }, caf::after(std::chrono::seconds(0)) >> [] {});
  CAF_CHECK_EQUAL(told, accepted->session);
  CAF_CHECK(!ask<msg::JoinChallenge>(hello("late-box", cluster::fresh_nonce()), &code));
  CAF_CHECK(code == msg::cluster_error::run_over);
}

CAF_TEST(a node that does not prove the secret or sends no hello is refused and the coordinator hears nothing) {
  msg::cluster_error code{};
  std::string text;
  const std::string nonce = cluster::fresh_nonce();
  auto challenge = ask<msg::JoinChallenge>(hello("gpu-box", nonce));
  CAF_REQUIRE(challenge);
  const auto wrong = cluster::join_proof("another secret", cluster::Role::node, challenge->nonce, nonce, "gpu-box");
  CAF_CHECK(!ask<msg::JoinAccepted>(msg::NodeProof{"gpu-box", wrong}, &code, &text));
  CAF_CHECK(code == msg::cluster_error::join_refused);
  CAF_CHECK(text.find("did not prove the shared secret") != std::string::npos);
  // The hello was used up: the right proof now comes too late.
  const auto right = cluster::join_proof(kSecret, cluster::Role::node, challenge->nonce, nonce, "gpu-box");
  CAF_CHECK(!ask<msg::JoinAccepted>(msg::NodeProof{"gpu-box", right}, &code, &text));
  CAF_CHECK(text.find("no hello from this node") != std::string::npos);
  disallow((msg::NodeJoined), from(gateway).to(coordinator));
}

CAF_TEST(hellos the gateway refuses before any proof) {
  struct Row {
    const char* what;
    msg::NodeHello hello;
    const char* why;
  };
  const std::string nonce = cluster::fresh_nonce();
  auto old_protocol = hello("gpu-box", nonce);
  old_protocol.protocol = msg::kClusterProtocol - 1;
  auto gpu = hello("gpu-box", nonce);
  gpu.devices = {{eval::Device::cuda(0), "H100", 80, 9, 0, 132}};
  auto none = hello("gpu-box", nonce);
  none.devices.clear();
  const std::vector<Row> rows{
      {"an older protocol", old_protocol, "this coordinator speaks"},
      {"a name that is no node name", hello("../etc", nonce), "is not a valid node name"},
      {"a short nonce", hello("gpu-box", "0123"), "nonce too short"},
      {"a GPU in a CPU run", gpu, "this run evaluates on cpu"},
      {"no devices", none, "no devices"},
  };
  for (const auto& r : rows) {
    CAF_MESSAGE(r.what);
    msg::cluster_error code{};
    std::string text;
    CAF_CHECK(!ask<msg::JoinChallenge>(r.hello, &code, &text));
    CAF_CHECK(code == msg::cluster_error::join_refused);
    CAF_CHECK(text.find(r.why) != std::string::npos);
  }
}

CAF_TEST(a node that joins again replaces its old session and one that leaves is reported lost) {
  auto first = join("gpu-box");
  CAF_REQUIRE(first);
  auto second = join("gpu-box");
  CAF_REQUIRE(second);
  CAF_CHECK_NOT_EQUAL(first->session, second->session);
  // The old session is gone: its heartbeats are refused, the new one's are not.
  msg::cluster_error code{};
  CAF_CHECK(!ask<caf::ok_atom>(msg::NodeHeartbeat{first->session, {}}, &code));
  CAF_CHECK(code == msg::cluster_error::session_unknown);
  CAF_CHECK(ask<caf::ok_atom>(msg::NodeHeartbeat{second->session, {}}));
  other->send(gateway, leave_atom_v, second->session);
  expect((leave_atom, uint64_t), from(other).to(gateway));
  expect((msg::NodeLost), from(gateway).to(coordinator));
  expect((msg::ClusterEvent), from(coordinator).to(telemetry));
  // The coordinator no longer hands the session work.
  auto pull = third->request(coordinator, caf::infinite, pull_eval_atom_v, std::string("cpu"), second->session);
  sched.run();
  bool lost = false;
  pull.receive([](msg::EvalRequest&) {},
               [&](caf::error& err) { lost = msg::cluster_code(err) == msg::cluster_error::session_lost; });
  CAF_CHECK(lost);
  CAF_CHECK(!ask<caf::ok_atom>(msg::NodeHeartbeat{second->session, {}}, &code));
  CAF_CHECK(code == msg::cluster_error::session_unknown);
}

CAF_TEST_FIXTURE_SCOPE_END()

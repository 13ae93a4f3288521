// Evaluator nodes over the network, as users run them: `crucible run` with [cluster] listen and `crucible node
// --join` processes on loopback (and, where the machine allows, in a network namespace as a second host). Nodes
// finish sweeps, die, join late, lack the secret, and go silent; every candidate still gets exactly one result.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>

#include "cli_support.h"
#include "process_support.h"
#include "run/jsonl.h"
#include "support.h"

using namespace crucible;
using nlohmann::json;
namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A coordinator node that evaluates nothing itself, and the evaluator nodes a test starts against it.
class Cluster {
 public:
  explicit Cluster(const std::string& tag, std::string listen_host = "127.0.0.1")
      : scratch_(tag), host_(std::move(listen_host)), port_(test::free_port()) {
    test::write_file(secret(), "a5f0c9e2d4b7a1368f2e0d9c7b6a5f4e3d2c1b0a99887766\n");
    chmod(secret().c_str(), 0600);
  }

  fs::path path(const std::string& name) const { return scratch_.path() / name; }
  fs::path secret() const { return path("secret"); }
  fs::path run_dir() const { return path("run"); }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

  // A best-of-N sweep with k samples a task (relu and softmax unless `tasks` says), judged on the CPU by nodes only.
  void start_run(int k, double node_timeout_s = 10, const std::string& extra = "", const std::string& seeds = "[1]",
                 const std::string& tasks = "names = [\"relu\", \"softmax\"]\n") {
    const fs::path file = path("experiment.toml");
    test::write_file(file, "[experiment]\nname = \"cluster\"\nmode = \"best_of_n\"\nseeds = " + seeds +
                           "\n[tasks]\n" + tasks +
                           "[best_of_n]\nk = " + std::to_string(k) + "\ngroup_size = 4\n"
                           "[eval]\ndevices = []\nbackend = \"cpu\"\nmode = \"fast\"\ncorrectness_trials = 1\n"
                           "timing_trials = 3\n[cluster]\nlisten = \"" + address() + "\"\nsecret_file = \"" +
                           secret().string() + "\"\nheartbeat_s = 0.25\nnode_timeout_s = " +
                           std::to_string(node_timeout_s) + "\n" + extra);
    coordinator_ = std::make_unique<test::Child>(
        std::vector<std::string>{"/usr/bin/env", "CRUCIBLE_CACHE_DIR=" + path("cache-run").string(), CRUCIBLE_CLI_PATH,
                                 "--log-level", "info", "run", file.string(), "--out", run_dir().string()},
        path("run.out"));
  }

  test::Child& start_node(const std::string& name, std::vector<std::string> extra = {},
                          std::vector<std::string> prefix = {}, const std::string& give_up_after = "30") {
    std::vector<std::string> argv = prefix;
    for (const std::string& a : {std::string("/usr/bin/env"), "CRUCIBLE_CACHE_DIR=" + path("cache-" + name).string(),
                                 std::string(CRUCIBLE_CLI_PATH), std::string("node"), std::string("--join"), address(),
                                 std::string("--name"), name, std::string("--give-up-after"), give_up_after,
                                 std::string("--exit-when-done")})
      argv.push_back(a);
    if (std::find(extra.begin(), extra.end(), "--secret-file") == extra.end())
      extra.insert(extra.end(), {"--secret-file", secret().string()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodes_[name] = std::make_unique<test::Child>(argv, path(name + ".out"));
    return *nodes_[name];
  }

  test::Child& coordinator() { return *coordinator_; }
  test::Child& node(const std::string& name) { return *nodes_.at(name); }

  // How many verdicts a node has logged so far (its log lines reach the run with its heartbeats).
  std::size_t judged_by(const std::string& name) const {
    const auto text = test::read_file(run_dir() / "logs" / "nodes" / name / "evaluator.cpu.log");
    std::size_t n = 0;
    for (std::size_t at = text.find("] candidate "); at != std::string::npos; at = text.find("] candidate ", at + 1)) ++n;
    return n;
  }

  std::vector<json> candidates() const { return run::read_jsonl(run_dir() / "seed-1" / "candidates.jsonl"); }
  std::vector<json> events() const {
    const auto file = run_dir() / "seed-1" / "cluster.jsonl";
    return fs::exists(file) ? run::read_jsonl(file) : std::vector<json>{};
  }
  std::vector<json> events_of(const std::string& kind, const std::string& node) const {
    std::vector<json> out;
    for (const auto& e : events())
      if (e["event"] == kind && e["node"] == node) out.push_back(e);
    return out;
  }

  // The run ends on its own, with every unit committed.
  void finishes(seconds limit = seconds(240)) {
    auto code = coordinator_->wait_for(limit);
    INFO(coordinator_->output());
    REQUIRE(code.has_value());
    REQUIRE(*code == 0);
  }

 private:
  test::ScratchDir scratch_;
  std::string host_;
  uint16_t port_;
  std::unique_ptr<test::Child> coordinator_;
  std::map<std::string, std::unique_ptr<test::Child>> nodes_;
};

// Exactly one record per candidate, each with a verdict from a node that joined.
std::map<std::string, int> check_exactly_once(const std::vector<json>& candidates, std::size_t expected) {
  std::set<uint64_t> ids;
  std::map<std::string, int> per_node;
  for (const auto& c : candidates) {
    CHECK(ids.insert(c["candidate_id"].get<uint64_t>()).second);
    CHECK(c.contains("status"));
    ++per_node[c.value("node", "")];
  }
  CHECK(candidates.size() == expected);
  return per_node;
}

}  // namespace

TEST_CASE("two CPU evaluator nodes run a best_of_n sweep to completion, with their logs and metrics in the run") {
  Cluster cluster("cluster-two");
  cluster.start_run(8);
  auto& a = cluster.start_node("node-a");
  auto& b = cluster.start_node("node-b");
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 16);
  CHECK(per_node.count("node-a"));
  CHECK(per_node.count("node-b"));
  // Both nodes leave on their own once the last run is over.
  CHECK(a.wait_for(seconds(20)) == 0);
  CHECK(b.wait_for(seconds(20)) == 0);
  // Devices announced, logs tagged and reachable, per-node metrics per unit.
  const auto joined = cluster.events_of("joined", "node-a");
  REQUIRE(joined.size() == 1);
  CHECK(joined[0]["devices"][0]["kind"] == "cpu");
  CHECK(joined[0]["devices"][0]["multiprocessors"].get<int>() >= 1);
  CHECK(test::read_file(cluster.run_dir() / "logs" / "nodes" / "node-a" / "evaluator.cpu.log").find("[node-a/evaluator.cpu]") !=
        std::string::npos);
  const auto steps = run::read_jsonl(cluster.run_dir() / "seed-1" / "steps.jsonl");
  int counted = 0;
  for (const auto& s : steps)
    for (const auto& [node, m] : s["nodes"].items()) counted += m["candidates"].get<int>();
  CHECK(counted == 16);
  const auto summary = json::parse(test::read_file(cluster.run_dir() / "summary.json"));
  const auto& nodes = summary["seeds"]["1"]["nodes"];
  CHECK(nodes["node-a"]["candidates"].get<int>() + nodes["node-b"]["candidates"].get<int>() == 16);
  CHECK(nodes["node-a"]["candidates_per_evaluation_second"].get<double>() > 0);
  CHECK(nodes["node-a"]["lost"] == 0);
  for (const auto& c : cluster.candidates()) {
    const auto& t = c["times"];
    REQUIRE(t.contains("dispatch"));
    CHECK(t["dispatch"][1].get<double>() >= t["dispatch"][0].get<double>());
  }
  auto logs = test::crucible_cli({"logs", cluster.run_dir().string(), "--node", "node-a"}, cluster.path("cache").string());
  CHECK(logs.exit_code == 0);
  CHECK(logs.output.find("[node-a/evaluator.cpu] candidate") != std::string::npos);
  CHECK(logs.output.find("[node-b/") == std::string::npos);
  CHECK(logs.output.find("[coordinator]") == std::string::npos);
}

TEST_CASE("a node serves each seed's run in turn and leaves after the last one") {
  Cluster cluster("cluster-seeds");
  cluster.start_run(4, 10, "", "[1, 2, 3]");
  auto& a = cluster.start_node("node-a");
  cluster.finishes();
  CHECK(a.wait_for(seconds(20)) == 0);
  for (const char* seed : {"seed-1", "seed-2", "seed-3"}) {
    CAPTURE(seed);
    const auto records = run::read_jsonl(cluster.run_dir() / seed / "candidates.jsonl");
    CHECK(check_exactly_once(records, 8).at("node-a") == 8);
  }
}

TEST_CASE("kill -9 of a node mid-sweep still yields exactly one result per candidate") {
  Cluster cluster("cluster-kill");
  cluster.start_run(24);
  auto& a = cluster.start_node("node-a");
  cluster.start_node("node-b");
  REQUIRE(test::eventually([&] { return cluster.judged_by("node-a") >= 3; }, seconds(120)));
  a.signal(SIGKILL);
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 48);
  CHECK(per_node.at("node-b") > 0);
  // The connection drop is seen at once, not after the heartbeat timeout.
  const auto lost = cluster.events_of("lost", "node-a");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["reason"].get<std::string>().find("connection lost") != std::string::npos);
  const auto summary = json::parse(test::read_file(cluster.run_dir() / "summary.json"));
  CHECK(summary["seeds"]["1"]["nodes"]["node-a"]["lost"] == 1);
}

TEST_CASE("a node without the secret is refused and never receives work") {
  Cluster cluster("cluster-secret");
  cluster.start_run(8);
  const fs::path wrong = cluster.path("wrong-secret");
  test::write_file(wrong, "00000000000000000000000000000000deadbeef\n");
  chmod(wrong.c_str(), 0600);
  auto& intruder = cluster.start_node("intruder", {"--secret-file", wrong.string()});
  auto code = intruder.wait_for(seconds(60));
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK(intruder.output().find("did not prove the shared secret") != std::string::npos);
  // A secret others may read is refused before anything is sent.
  const fs::path open_secret = cluster.path("open-secret");
  test::write_file(open_secret, "a5f0c9e2d4b7a1368f2e0d9c7b6a5f4e3d2c1b0a99887766\n");
  chmod(open_secret.c_str(), 0644);
  auto& careless = cluster.start_node("careless", {"--secret-file", open_secret.string()});
  CHECK(careless.wait_for(seconds(30)) == 2);
  CHECK(careless.output().find("chmod 600") != std::string::npos);
  cluster.start_node("node-a");
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 16);
  CHECK(per_node.size() == 1);
  CHECK(per_node.count("node-a"));
  CHECK(cluster.events_of("joined", "intruder").empty());
  CHECK_FALSE(fs::exists(cluster.run_dir() / "logs" / "nodes" / "intruder"));
}

TEST_CASE("a node that joins mid-run receives work") {
  Cluster cluster("cluster-late");
  cluster.start_run(24);
  cluster.start_node("node-a");
  REQUIRE(test::eventually([&] { return cluster.judged_by("node-a") >= 4; }, seconds(120)));
  const double joined_at = wall_now();
  cluster.start_node("node-b");
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 48);
  REQUIRE(per_node.count("node-b"));
  CHECK(per_node.at("node-b") > 0);
  for (const auto& c : cluster.candidates())
    if (c["node"] == "node-b") CHECK(c["times"]["dispatch"][0].get<double>() >= joined_at);
}

namespace {

// Freezes (or cuts off) node-a mid-sweep, checks it is declared lost within the timeout and its work re-queued,
// then lets it back: what it finished meanwhile is discarded, and it joins again.
void partition_test(Cluster& cluster, const std::function<void()>& cut, const std::function<void()>& heal) {
  const double timeout = 2.0;
  cluster.start_run(24, timeout);
  cluster.start_node("node-a");
  cluster.start_node("node-b");
  REQUIRE(test::eventually([&] { return cluster.judged_by("node-a") >= 3; }, seconds(120)));
  const double cut_at = wall_now();
  cut();
  REQUIRE(test::eventually([&] { return !cluster.events_of("lost", "node-a").empty(); }, seconds(30)));
  const auto lost = cluster.events_of("lost", "node-a").front();
  const double detected = lost["at"].get<double>() - cut_at;
  MESSAGE("partition detected after " << detected << " s (timeout " << timeout << " s): " << lost.dump());
  CHECK(detected >= timeout - 0.3);
  CHECK(detected <= timeout + 1.5);
  CHECK(lost["reason"].get<std::string>().find("no heartbeat") != std::string::npos);
  std::this_thread::sleep_for(milliseconds(500));
  heal();
  // Back in the run under a new session; the verdict it was working on when cut off arrives late and is discarded.
  CHECK(test::eventually([&] { return cluster.events_of("joined", "node-a").size() >= 2; }, seconds(60)));
  if (!lost["requeued"].empty())
    CHECK(test::eventually([&] { return !cluster.events_of("late_result", "node-a").empty(); }, seconds(30)));
  cluster.finishes();
  check_exactly_once(cluster.candidates(), 48);
  // A candidate it held when cut off was judged elsewhere; its own verdict, if it sent one, was discarded.
  std::set<uint64_t> requeued;
  for (const auto& id : lost["requeued"]) requeued.insert(id.get<uint64_t>());
  for (const auto& c : cluster.candidates())
    if (requeued.count(c["candidate_id"].get<uint64_t>()))
      CHECK(c["times"]["dispatch"][0].get<double>() > cut_at);
  // A late verdict is for a candidate the run judged elsewhere (exactly once, checked above). It need not be in the
  // lost event's list: a dispatch to the frozen node that times out re-queues its candidate before the node is lost.
  std::set<uint64_t> judged;
  for (const auto& c : cluster.candidates()) judged.insert(c["candidate_id"].get<uint64_t>());
  for (const auto& late : cluster.events_of("late_result", "node-a"))
    CHECK(judged.count(late["candidate_id"].get<uint64_t>()));
}

bool run_quietly(const std::string& command) { return std::system(("(" + command + ") >/dev/null 2>&1").c_str()) == 0; }

}  // namespace

TEST_CASE("a partitioned node (frozen: its connection stays open, nothing arrives) is detected within the timeout") {
  Cluster cluster("cluster-frozen");
  partition_test(cluster, [&] { cluster.node("node-a").signal(SIGSTOP); },
                 [&] { cluster.node("node-a").signal(SIGCONT); });
}

TEST_CASE("two hosts: a node in its own network namespace, partitioned by taking the link down") {
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string ns = "crucible" + tag, host_if = "crh" + tag, node_if = "crn" + tag;
  if (geteuid() != 0 || !run_quietly("ip netns add " + ns)) {
    MESSAGE("SKIPPED: network namespaces need root and iproute2 (the loopback tests above cover the same paths)");
    return;
  }
  struct Cleanup {
    std::string ns, host_if;
    ~Cleanup() {
      run_quietly("ip link del " + host_if);
      run_quietly("ip netns del " + ns);
    }
  } cleanup{ns, host_if};
  const std::string subnet = "10.213." + std::to_string(getpid() % 250) + ".";
  REQUIRE(run_quietly("ip link add " + host_if + " type veth peer name " + node_if));
  REQUIRE(run_quietly("ip link set " + node_if + " netns " + ns));
  REQUIRE(run_quietly("ip addr add " + subnet + "1/24 dev " + host_if));
  REQUIRE(run_quietly("ip link set " + host_if + " up"));
  REQUIRE(run_quietly("ip netns exec " + ns + " ip addr add " + subnet + "2/24 dev " + node_if));
  REQUIRE(run_quietly("ip netns exec " + ns + " ip link set " + node_if + " up"));
  REQUIRE(run_quietly("ip netns exec " + ns + " ip link set lo up"));
  Cluster cluster("cluster-netns", subnet + "1");
  const double timeout = 2.0;
  cluster.start_run(24, timeout);
  // node-a is the other host; node-b shares the coordinator's.
  cluster.start_node("node-a", {}, {"/usr/sbin/ip", "netns", "exec", ns});
  cluster.start_node("node-b");
  REQUIRE(test::eventually([&] { return cluster.judged_by("node-a") >= 3; }, seconds(120)));
  const double cut_at = wall_now();
  REQUIRE(run_quietly("ip link set " + host_if + " down"));
  REQUIRE(test::eventually([&] { return !cluster.events_of("lost", "node-a").empty(); }, seconds(30)));
  const double detected = cluster.events_of("lost", "node-a").front()["at"].get<double>() - cut_at;
  MESSAGE("link down detected after " << detected << " s");
  CHECK(detected <= timeout + 1.5);
  REQUIRE(run_quietly("ip link set " + host_if + " up"));
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 48);
  CHECK(per_node.count("node-a"));
}

TEST_CASE("over TLS: nodes with a certificate from the run's CA join, one from another CA never gets in") {
  Cluster cluster("cluster-tls");
  const auto dir = cluster.path("tls");
  fs::create_directories(dir);
  auto make_ca = [&](const std::string& ca) {
    return run_quietly("cd " + dir.string() + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca +
                       ".key -out " + ca + ".pem -days 2 -subj /CN=" + ca);
  };
  auto make_cert = [&](const std::string& name, const std::string& ca) {
    return run_quietly("cd " + dir.string() + " && openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " +
                       name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " + name + ".csr -CA " + ca +
                       ".pem -CAkey " + ca + ".key -CAcreateserial -out " + name + ".pem -days 2");
  };
  if (!make_ca("ca")) {
    MESSAGE("SKIPPED: the openssl command is needed to make test certificates");
    return;
  }
  REQUIRE(make_cert("coordinator", "ca"));
  REQUIRE(make_cert("node-a", "ca"));
  REQUIRE(make_ca("other-ca"));
  REQUIRE(make_cert("stranger", "other-ca"));
  auto files = [&](const std::string& name, const std::string& ca) {
    return std::vector<std::string>{"--tls-certificate", (dir / (name + ".pem")).string(), "--tls-key",
                                    (dir / (name + ".key")).string(), "--tls-ca", (dir / (ca + ".pem")).string()};
  };
  cluster.start_run(8, 10, "tls_certificate = \"" + (dir / "coordinator.pem").string() + "\"\ntls_key = \"" +
                               (dir / "coordinator.key").string() + "\"\ntls_ca = \"" + (dir / "ca.pem").string() + "\"\n");
  auto& stranger = cluster.start_node("stranger", files("stranger", "other-ca"), {}, "4");
  auto& plain = cluster.start_node("plain", {}, {}, "4");
  CHECK(stranger.wait_for(seconds(60)) == 3);  // gave up: the handshake never completes
  CHECK(plain.wait_for(seconds(60)) == 3);
  cluster.start_node("node-a", files("node-a", "ca"));
  cluster.finishes();
  const auto per_node = check_exactly_once(cluster.candidates(), 16);
  CHECK(per_node.size() == 1);
  CHECK(per_node.count("node-a"));
  CHECK(test::read_file(cluster.run_dir() / "logs" / "node.log").find("(TLS)") != std::string::npos);
}

TEST_CASE("a node judges an imported task whose TorchScript reference it reads from its copy of the tasks dir") {
  Cluster cluster("cluster-imported");
  // The run's tasks: a copy of the TorchScript fixture; the node gets its own copy, as a second host would.
  for (const char* dir : {"tasks", "node-tasks"}) {
    fs::create_directories(cluster.path(dir));
    for (const char* file : {"bias_relu.toml", "bias_relu.pt"})
      fs::copy_file(fs::path(CRUCIBLE_SOURCE_DIR) / "tests/fixtures/torchscript" / file, cluster.path(dir) / file);
  }
  fs::create_directories(cluster.path("replay/bias_relu"));
  test::write_file(cluster.path("replay/bias_relu/a.cpp"),
                   "#include <crucible/kernel.h>\n"
                   "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t,"
                   " void*) {\n  const float* x = static_cast<const float*>(in[0].data);\n"
                   "  const float* b = static_cast<const float*>(in[1].data);\n"
                   "  float* y = static_cast<float*>(out[0].data);\n"
                   "  const int64_t m = in[0].shape[0], n = in[0].shape[1];\n"
                   "  for (int64_t i = 0; i < m * n; ++i) { float v = x[i] + b[i % n]; y[i] = v > 0.f ? v : 0.f; }\n"
                   "  return 0;\n}\n");
  cluster.start_run(4, 10,
                    "[policy]\nkind = \"replay\"\nreplay_dir = \"" + cluster.path("replay").string() + "\"\n",
                    "[1]", "names = [\"bias_relu\"]\ndir = \"" + cluster.path("tasks").string() + "\"\n");
  cluster.start_node("node-a", {"--tasks-dir", cluster.path("node-tasks").string()});
  cluster.finishes();
  const auto records = cluster.candidates();
  CHECK(check_exactly_once(records, 4).at("node-a") == 4);
  for (const auto& c : records) CHECK(c["status"] == "correct");
}

// The live view of a running experiment: `crucible run --monitor 0` serves its page, status, log tail and
// Prometheus metrics while the run goes on; a page rendered by headless chromium during the run shows the curves
// and the log; off loopback a token is required. The browser case exits 77 (shown as skipped) without chromium.
#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <regex>
#include <thread>

#include "cli_support.h"
#include "monitor/monitor_server.h"
#include "process_support.h"
#include "run/jsonl.h"
#include "support.h"
#include "tools/loopback_socket.h"

using namespace crucible;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Long enough to be watched: 12 quick steps on the CPU.
const std::string kExperiment = R"([experiment]
name = "watched"
mode = "grpo"
[tasks]
names = ["relu", "softmax"]
[grpo]
steps = 12
batch_size = 2
group_size = 4
[eval]
devices = ["cpu"]
mode = "fast"
correctness_trials = 1
timing_trials = 3
)";

struct WatchedRun {
  WatchedRun(const test::ScratchDir& scratch, const std::string& toml, const std::vector<std::string>& extra,
             const std::vector<std::string>& env = {})
      : dir(scratch.path() / "run"), child([&] {
          const fs::path file = scratch.path() / "watched.toml";
          test::write_file(file, toml);
          std::vector<std::string> argv{"/usr/bin/env", "CRUCIBLE_CACHE_DIR=" + (scratch.path() / "cache").string()};
          argv.insert(argv.end(), env.begin(), env.end());
          argv.insert(argv.end(), {CRUCIBLE_CLI_PATH, "run", file.string(), "--out", (scratch.path() / "run").string()});
          argv.insert(argv.end(), extra.begin(), extra.end());
          return argv;
        }(), scratch.path() / "run.out") {
    const std::regex address(R"(monitor: http://[^:/]+:(\d+)/)");
    std::smatch m;
    REQUIRE(test::eventually([&] {
      const std::string out = child.output();
      if (!std::regex_search(out, m, address)) return false;
      port = std::stoi(m[1]);
      return true;
    }, std::chrono::seconds(60)));
  }
  // Waits until `steps` steps are committed.
  void wait_for_steps(std::size_t steps) {
    REQUIRE(test::eventually([&] { return run::read_jsonl(dir / "seed-1" / "steps.jsonl", true).size() >= steps; },
                             std::chrono::seconds(120)));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/"; }
  fs::path dir;
  test::Child child;
  int port = 0;
};

bool have_chromium() { return std::system("command -v chromium > /dev/null 2>&1") == 0; }

// A monitor served from this process over a scratch run directory, on a free loopback port.
struct InProcessMonitor {
  explicit InProcessMonitor(monitor::MonitorOptions options = {})
      : scratch("monitor-inproc"), live(std::make_shared<monitor::LiveStatus>()), server([&] {
          options.run_dir = scratch.path();
          return monitor::MonitorServer(options, live);
        }()) {}
  test::ScratchDir scratch;
  std::shared_ptr<monitor::LiveStatus> live;
  monitor::MonitorServer server;
};

// The answer's status to a request sent whole on a raw socket (0: none within the limit).
int status_of(int port, const std::string& request) {
  test::LoopbackSocket s(port);
  REQUIRE(s.ok());
  REQUIRE(s.send_all(request));
  return s.status();
}

std::string head(const std::string& method, const std::string& extra_headers) {
  return method + " /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
}

}  // namespace

TEST_CASE("monitor: status, log tail and metrics are served while the run goes on") {
  test::ScratchDir scratch("monitor-live");
  WatchedRun run(scratch, kExperiment, {"--monitor", "0", "--quiet"});
  run.wait_for_steps(1);
  httplib::Client client("127.0.0.1", run.port);
  // The step's line is written before the coordinator updates the live status and before the verdicts file is
  // read back: wait for the state checked, not for a moment.
  json s;
  REQUIRE(test::eventually([&] {
    auto status = client.Get("/status.json");
    if (!status || status->status != 200) return false;
    s = json::parse(status->body);
    return s["live"]["units_committed"].get<int>() >= 1 && !s["curves"].empty() && !s["recent"].empty();
  }, std::chrono::seconds(120), std::chrono::milliseconds(100)));
  CHECK(s["live"]["experiment"] == "watched");
  CHECK(s["live"]["units_total"] == 12);
  CHECK(s["live"]["units_committed"].get<int>() >= 1);
  CHECK(s["live"]["actors"].contains("generator"));
  CHECK(!s["curves"].empty());
  CHECK(s["curves"][0]["points"].size() >= 1);
  CHECK(!s["recent"].empty());
  auto logs = client.Get("/logs.json?actor=coordinator&level=info");
  REQUIRE(logs);
  const json l = json::parse(logs->body);
  REQUIRE(!l["entries"].empty());
  for (const auto& e : l["entries"]) CHECK(e["actor"] == "coordinator");
  CHECK(std::find(l["actors"].begin(), l["actors"].end(), "evaluator.cpu") != l["actors"].end());
  CHECK(client.Get("/logs.json?level=loud")->status == 400);
  // Without a token only loopback host names are answered (a rebound web page's name is not).
  CHECK(client.Get("/status.json", {{"Host", "evil.example:80"}})->status == 403);
  CHECK(client.Get("/status.json", {{"Host", "localhost:1"}})->status == 200);
  auto metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("crucible_units_total 12") != std::string::npos);
  CHECK(metrics->body.find("# TYPE crucible_candidates_done_total counter") != std::string::npos);
  const auto code = run.child.wait_for(std::chrono::seconds(300));
  INFO(run.child.output());
  CHECK(code == 0);
}

TEST_CASE("monitor: off loopback a token is required, and without one the run does not start") {
  test::ScratchDir scratch("monitor-token");
  const std::string open = kExperiment + "[monitor]\nlisten = \"0.0.0.0:0\"\ntoken_env = \"WATCH_TOKEN\"\n";
  const fs::path file = scratch.path() / "open.toml";
  test::write_file(file, open);
  auto refused = test::crucible_cli({"run", file.string(), "--out", (scratch.path() / "refused").string()},
                                    (scratch.path() / "cache").string(), 60);
  CHECK(refused.exit_code == 2);
  CHECK(refused.output.find("WATCH_TOKEN") != std::string::npos);
  CHECK(!fs::exists(scratch.path() / "refused" / "seed-1"));

  WatchedRun run(scratch, open, {"--quiet"}, {"WATCH_TOKEN=s3cret"});
  httplib::Client client("127.0.0.1", run.port);
  CHECK(client.Get("/status.json")->status == 401);
  CHECK(client.Get("/status.json?token=wrong")->status == 401);
  CHECK(client.Get("/status.json?token=s3cret")->status == 200);
  CHECK(client.Get("/metrics", {{"Authorization", "Bearer s3cret"}})->status == 200);
}

TEST_CASE("monitor: headless chromium renders the page during a run with the curves and the log") {
  if (!have_chromium()) {
    std::cout << "SKIPPED: chromium is not installed (tools/setup.sh installs it)" << std::endl;
    std::exit(77);
  }
  test::ScratchDir scratch("monitor-browser");
  // Longer than the browser takes: the run is stopped (-9, as a crash; resumable) when the page has been seen.
  std::string longer = kExperiment;
  longer.replace(longer.find("steps = 12"), 10, "steps = 60");
  WatchedRun run(scratch, longer, {"--monitor", "0", "--quiet"});
  run.wait_for_steps(2);
  const std::vector<std::string> browser{"chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                         "--virtual-time-budget=5000", "--window-size=1200,1600"};
  auto dom_argv = browser;
  dom_argv.insert(dom_argv.begin(), "/usr/bin/env");
  dom_argv.insert(dom_argv.end(), {"--dump-dom", run.url()});
  eval::ProcessLimits limits;
  limits.wall_seconds = 90;
  const auto dom = eval::run_process(dom_argv, limits);
  INFO(dom.output.substr(0, 4000));
  // The script ran: the curves are drawn and the log's rows are there.
  CHECK(dom.output.find("data-curve=\"reward\"") != std::string::npos);
  CHECK(dom.output.find("<polyline points=") != std::string::npos);
  CHECK(dom.output.find("of 60 units committed") != std::string::npos);
  CHECK(dom.output.find(">coordinator</td>") != std::string::npos);
  CHECK(dom.output.find(">correct</td>") != std::string::npos);
  const fs::path shot = scratch.path() / "monitor.png";
  auto shot_argv = browser;
  shot_argv.insert(shot_argv.begin(), "/usr/bin/env");
  shot_argv.insert(shot_argv.end(), {"--screenshot=" + shot.string(), run.url()});
  eval::run_process(shot_argv, limits);
  REQUIRE(fs::exists(shot));
  const std::string png = test::read_file(shot);
  CHECK(png.rfind("\x89PNG", 0) == 0);
  CHECK(png.size() > 20000);  // a page with tables and charts, not a blank one
  MESSAGE("screenshot: " << png.size() << " bytes");
}

TEST_CASE("monitor: without a token only Host headers that name loopback are answered, decided on parsed addresses") {
  InProcessMonitor m;
  httplib::Client client("127.0.0.1", m.server.port());
  const std::vector<std::pair<std::string, int>> cases{
      {"127.0.0.1", 200},
      {"127.0.0.1:8080", 200},
      {"127.255.0.9:1", 200},
      {"localhost:8080", 200},
      {"LocalHost", 200},
      {"[::1]:8080", 200},
      {"[::1]", 200},
      // Names a web page's author can register and point at 127.0.0.1 (DNS rebinding).
      {"127.evil.example", 403},
      {"127.0.0.1.attacker.example:80", 403},
      {"127.0.0.1.attacker.example", 403},
      {"localhost.attacker.example", 403},
      {"evil.example:80", 403},
      // Malformed, or not loopback.
      {"[::1", 403},
      {"[::1]x", 403},
      {"127.0.0.1:80:80", 403},
      {"127.0.0.1:port", 403},
      {"::1", 403},
      {"[127.0.0.1]", 403},
      {"10.0.0.1", 403},
  };
  for (const auto& [host, expected] : cases) {
    INFO("Host: " << host);
    auto res = client.Get("/metrics", {{"Host", host}});
    REQUIRE(res);
    CHECK(res->status == expected);
  }
}

TEST_CASE("monitor: a listen host is loopback only as a parsed address or the exact name localhost") {
  const std::vector<std::pair<std::string, bool>> cases{
      {"127.0.0.1", true},          {"127.1.2.3", true},       {"localhost", true},
      {"::1", true},                {"[::1]", true},           {"::ffff:127.0.0.1", true},
      {"127.evil.example", false},  {"127.0.0.1.attacker.example", false},
      {"localhost.example", false}, {"0.0.0.0", false},        {"::", false},
      {"", false},                  {"128.0.0.1", false},      {"127.0.0.1 ", false},
  };
  for (const auto& [host, loopback] : cases) {
    INFO("host: " << host);
    CHECK(monitor::is_loopback(host) == loopback);
  }
  // Such a name needs a token like any other non-loopback address: it is refused before anything is bound.
  monitor::MonitorOptions options;
  options.host = "127.evil.example";
  CHECK_THROWS_AS(monitor::MonitorServer(options, std::make_shared<monitor::LiveStatus>()), std::invalid_argument);
}

TEST_CASE("monitor: request bodies are refused from the request head, before they are read") {
  InProcessMonitor m;
  const int port = m.server.port();
  // Each head is sent with no body after it: an answer proves the server did not wait for the body.
  CHECK(status_of(port, head("POST", "Content-Length: 314572800\r\n")) == 413);
  CHECK(status_of(port, head("GET", "Content-Length: 5000\r\n")) == 413);
  CHECK(status_of(port, head("PUT", "Content-Length: 99999999999999999999999\r\n")) == 413);
  CHECK(status_of(port, head("POST", "Transfer-Encoding: chunked\r\n") + "10\r\n0123456789abcdef\r\n") == 411);
  CHECK(status_of(port, head("POST", "")) == 411);
  CHECK(status_of(port, head("POST", "Content-Length: 12\r\nContent-Encoding: gzip\r\n")) == 415);
  CHECK(status_of(port, head("POST", "Content-Length: 1x\r\n")) == 400);
  CHECK(status_of(port, head("POST", "Content-Length: 5000\r\nExpect: 100-continue\r\n")) == 413);
  // A small body is read, and the request goes on to routing (no route takes a POST).
  CHECK(status_of(port, head("POST", "Content-Length: 2\r\n") + "{}") == 404);
  CHECK(status_of(port, head("GET", "")) == 200);

  // A chunked body streamed without pause is not taken in: the server answers and closes while it is being sent.
  test::LoopbackSocket streamer(port);
  REQUIRE(streamer.ok());
  std::string chunk(1 << 20, 'x');
  std::string body;
  for (int i = 0; i < 64; ++i) body += "100000\r\n" + chunk + "\r\n";
  body += "0\r\n\r\n";
  CHECK_FALSE(streamer.send_all(head("POST", "Transfer-Encoding: chunked\r\n") + body));
}

TEST_CASE("monitor: slow clients neither starve a probe nor hold their connection past the request deadline") {
  InProcessMonitor m;
  const int port = m.server.port();
  // More connections than cpp-httplib's default 8 threads, each sending a header line and never the end of the head.
  constexpr int kSlow = 10;
  std::vector<std::unique_ptr<test::LoopbackSocket>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<test::LoopbackSocket>(port));
    REQUIRE(slow.back()->ok());
    REQUIRE(slow.back()->send_all("GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  }
  std::atomic<bool> stop{false};
  std::thread dribbler([&] {
    for (int line = 0; !stop; ++line) {
      for (auto& s : slow) s->send_all("X-Slow: " + std::to_string(line) + "\r\n", std::chrono::milliseconds(100));
      for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Stop {
    std::atomic<bool>& flag;
    std::thread& thread;
    ~Stop() {
      flag = true;
      thread.join();
    }
  } stop_dribbler{stop, dribbler};

  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(20));
  const auto asked = std::chrono::steady_clock::now();
  auto probe = client.Get("/status.json");
  const auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  REQUIRE(probe);
  CHECK(probe->status == 200);
  MESSAGE("probe answered in " << waited << " s beside " << kSlow << " slow connections");
  // The probe did not wait for the slow connections to be dropped: they are all still held.
  for (auto& s : slow) CHECK_FALSE(s->peer_spoke());
  // Still dribbling, each is dropped once the request deadline has passed (five seconds; generous bound here).
  for (auto& s : slow) CHECK(test::eventually([&] { return s->peer_spoke(); }, std::chrono::seconds(60)));
}

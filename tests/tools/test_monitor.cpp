// The live view of a running experiment: `crucible run --monitor 0` serves its page, status, log tail and
// Prometheus metrics while the run goes on; a page rendered by headless chromium during the run shows the curves
// and the log; off loopback a token is required. The browser case exits 77 (shown as skipped) without chromium.
#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iostream>
#include <regex>

#include "cli_support.h"
#include "process_support.h"
#include "run/jsonl.h"
#include "support.h"

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

}  // namespace

TEST_CASE("monitor: status, log tail and metrics are served while the run goes on") {
  test::ScratchDir scratch("monitor-live");
  WatchedRun run(scratch, kExperiment, {"--monitor", "0", "--quiet"});
  run.wait_for_steps(1);
  httplib::Client client("127.0.0.1", run.port);
  auto status = client.Get("/status.json");
  REQUIRE(status);
  REQUIRE(status->status == 200);
  const json s = json::parse(status->body);
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

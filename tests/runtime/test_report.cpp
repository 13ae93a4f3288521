// `crucible report` on real runs: a GRPO run's tables against the steps.jsonl and candidates.jsonl they come
// from, and a best_of_n + ttt pair compared (fast_p by hand, per-task speedups, budget warning), in HTML, Markdown,
// CSV and JSON.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "cli_support.h"
#include "report/render.h"
#include "run/jsonl.h"
#include "support.h"

using namespace crucible;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFastEval = "[eval]\ndevices = [\"cpu\"]\nmode = \"fast\"\ncorrectness_trials = 1\ntiming_trials = 3\n";

fs::path run_experiment(const test::ScratchDir& scratch, const std::string& name, const std::string& toml) {
  const fs::path file = scratch.path() / (name + ".toml");
  test::write_file(file, toml);
  const fs::path dir = scratch.path() / name;
  auto r = test::crucible_cli({"run", file.string(), "--out", dir.string(), "--quiet"},
                              (scratch.path() / "cache").string(), 600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir;
}

eval::ProcessResult report_cli(const std::vector<std::string>& args) {
  std::vector<std::string> all{"report"};
  all.insert(all.end(), args.begin(), args.end());
  return test::crucible_cli(all, "/tmp/unused-cache", 120);
}

// The report written to standard output, after the warnings `report` also writes to standard error (the helper
// captures both; the warnings go out before the report is rendered).
json stdout_report(const eval::ProcessResult& r) {
  const auto at = r.output.find("\n{");
  return json::parse(r.output.rfind("{", 0) == 0 || at == std::string::npos ? r.output : r.output.substr(at + 1));
}

const json& row_where(const json& rows, const char* key, const json& value, const char* key2 = nullptr,
                      const json& value2 = nullptr) {
  for (const auto& r : rows)
    if (r[key] == value && (!key2 || r[key2] == value2)) return r;
  FAIL("no row with " << key << " = " << value.dump());
  static json none;
  return none;
}

}  // namespace

TEST_CASE("crucible report: a grpo run's tables are the numbers its records hold, in every format") {
  test::ScratchDir scratch("report-grpo");
  const auto dir = run_experiment(scratch, "grpo", R"([experiment]
name = "small"
mode = "grpo"
seeds = [1, 2]
[tasks]
names = ["relu", "softmax"]
[grpo]
steps = 3
batch_size = 2
group_size = 4
)" + kFastEval);

  auto r = report_cli({dir.string(), "--out", "-", "--format", "json"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = stdout_report(r);
  const auto& steps = report["tables"]["steps"]["rows"];
  REQUIRE(steps.size() == 3);
  // Each step's numbers: the mean over seeds of what each seed's steps.jsonl says.
  std::map<int, std::vector<json>> recorded;
  for (int seed : {1, 2})
    for (const auto& s : run::read_jsonl(dir / ("seed-" + std::to_string(seed)) / "steps.jsonl"))
      recorded[s["step"].get<int>()].push_back(s);
  for (const auto& [step, per_seed] : recorded) {
    CAPTURE(step);
    REQUIRE(per_seed.size() == 2);
    const auto& row = row_where(steps, "step", step);
    CHECK(row["seeds"] == 2);
    CHECK(row["samples"] == 16);
    for (const char* key : {"reward_mean", "correct", "fast_1"}) {
      CAPTURE(key);
      const double a = per_seed[0][key].get<double>(), b = per_seed[1][key].get<double>();
      CHECK(row[key].get<double>() == doctest::Approx((a + b) / 2));
    }
    CHECK(row["reward_mean_low"].get<double>() ==
          doctest::Approx(std::min(per_seed[0]["reward_mean"].get<double>(), per_seed[1]["reward_mean"].get<double>())));
    CHECK(row["fast_1.2"].get<double>() ==
          doctest::Approx((per_seed[0]["fast_1_2"].get<double>() + per_seed[1]["fast_1_2"].get<double>()) / 2));
  }
  // Verdict counts add up to the samples; the best kernel per task is the fastest correct record of either seed.
  std::map<std::string, double> fastest;
  std::map<int, int> per_step;
  for (int seed : {1, 2})
    for (const auto& c : run::read_jsonl(dir / ("seed-" + std::to_string(seed)) / "candidates.jsonl")) {
      ++per_step[c["step"].get<int>()];
      if (c["status"] == "correct") fastest[c["task"]] = std::max(fastest[c["task"]], c["speedup"].get<double>());
    }
  for (const auto& row : report["tables"]["status"]["rows"]) {
    int total = 0;
    for (const char* s : {"parse_error", "compile_error", "rejected", "incorrect", "runtime_error", "timeout", "correct"})
      total += row[s].get<int>();
    CHECK(total == per_step[row["step"].get<int>()]);
  }
  for (const auto& [task, speedup] : fastest)
    CHECK(row_where(report["tables"]["best"]["rows"], "task", task)["speedup"].get<double>() == doctest::Approx(speedup));
  CHECK(report["tables"]["budget"]["rows"][0]["samples"] == 48);
  CHECK(report["tables"]["budget"]["rows"][0]["samples_per_task"] == 12);
  CHECK(report["tables"]["nodes"]["rows"][0]["candidates"] == 48);
  CHECK(report["charts"][0]["series"][0]["points"].size() == 3);
  CHECK(report["warnings"].empty());

  // HTML (the default, beside the run), Markdown and CSV carry the same tables.
  r = report_cli({dir.string()});
  REQUIRE(r.exit_code == 0);
  const std::string html = test::read_file(dir / "report.html");
  CHECK(html.find("<svg class=\"chart\" data-chart=\"reward\"") != std::string::npos);
  CHECK(html.find("<svg class=\"timeline\"") != std::string::npos);
  CHECK(html.find("data-table=\"best\"") != std::string::npos);
  CHECK(html.find("crucible_forward") != std::string::npos);  // the best kernels' sources
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // nothing fetched from a network
  CHECK(html.find("<script") == std::string::npos);
  r = report_cli({dir.string(), "--out", (scratch.path() / "r.md").string()});
  REQUIRE(r.exit_code == 0);
  const std::string md = test::read_file(scratch.path() / "r.md");
  CHECK(md.find("| run | step | seeds | samples | reward_mean") != std::string::npos);
  r = report_cli({dir.string(), "--out", (scratch.path() / "r.csv").string()});
  REQUIRE(r.exit_code == 0);
  const std::string csv = test::read_file(scratch.path() / "r.csv");
  int step_rows = 0;
  for (std::size_t at = csv.find("\nsteps,"); at != std::string::npos; at = csv.find("\nsteps,", at + 1)) ++step_rows;
  CHECK(step_rows == 3);
  CHECK(csv.rfind("table,run,step,seeds,samples,reward_mean", 0) == 0);

  // `crucible runs` lists it; `crucible show` prints one candidate, asking for the seed where ids repeat.
  auto listed = test::crucible_cli({"runs", scratch.path().string()}, "/tmp/unused-cache", 60);
  INFO(listed.output);
  REQUIRE(listed.exit_code == 0);
  CHECK(listed.output.find("grpo") != std::string::npos);
  CHECK(listed.output.find("finished") != std::string::npos);
  CHECK(listed.output.find("tasks correct") != std::string::npos);
  const auto first = run::read_jsonl(dir / "seed-2" / "candidates.jsonl").front();
  const std::string id = std::to_string(first["candidate_id"].get<uint64_t>());
  auto shown = test::crucible_cli({"show", dir.string(), id}, "/tmp/unused-cache", 60);
  CHECK(shown.exit_code == 2);
  CHECK(shown.output.find("--seed") != std::string::npos);
  shown = test::crucible_cli({"show", dir.string(), id, "--seed", "2"}, "/tmp/unused-cache", 60);
  INFO(shown.output);
  REQUIRE(shown.exit_code == 0);
  CHECK(shown.output.find("status:    " + first["status"].get<std::string>()) != std::string::npos);
  CHECK(shown.output.find("crucible_forward") != std::string::npos);
  CHECK(shown.output.find(first["source_file"].get<std::string>()) != std::string::npos);
  CHECK(test::crucible_cli({"show", dir.string(), "987654321"}, "/tmp/unused-cache", 60).exit_code == 2);
}

TEST_CASE("crucible report: best_of_n against ttt, fast_p with intervals, per-task speedups and a budget warning") {
  test::ScratchDir scratch("report-compare");
  const std::string tasks = "[tasks]\nnames = [\"relu\", \"gelu\"]\n";
  const auto bon = run_experiment(scratch, "bon", "[experiment]\nname = \"bon\"\nmode = \"best_of_n\"\n" + tasks +
                                                      "[best_of_n]\nk = 8\ngroup_size = 4\n" + kFastEval);
  const auto ttt = run_experiment(scratch, "ttt", "[experiment]\nname = \"ttt\"\nmode = \"ttt\"\n" + tasks +
                                                      "[ttt]\nsteps = 3\nrollouts = 4\n" + kFastEval);
  auto r = report_cli({bon.string(), ttt.string(), "--out", "-", "--format", "json"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = stdout_report(r);
  CHECK(r.output.find("warning: budgets differ") != std::string::npos);  // also on stderr
  // fast_p by hand: per task, is the best correct speedup above p?
  for (const auto& [dir, label] : {std::pair{bon, "bon (bon)"}, std::pair{ttt, "ttt (ttt)"}}) {
    std::map<std::string, double> best;
    for (const auto& c : run::read_jsonl(dir / "seed-1" / "candidates.jsonl")) {
      best.try_emplace(c["task"], 0.0);
      if (c["status"] == "correct") best[c["task"]] = std::max(best[c["task"]], c["speedup"].get<double>());
    }
    for (double p : {0.0, 1.0, 1.2, 1.5, 2.0}) {
      double hits = 0;
      for (const auto& [task, s] : best) hits += s > p;
      const auto& row = row_where(report["tables"]["fast_p"]["rows"], "run", label, "p", p);
      CAPTURE(label);
      CAPTURE(p);
      CHECK(row["fast_p"].get<double>() == doctest::Approx(hits / 2));
      CHECK(row["n"] == 2);
      CHECK(row["ci_low"].get<double>() <= row["fast_p"].get<double>());
      CHECK(row["ci_high"].get<double>() >= row["fast_p"].get<double>());
    }
    for (const auto& [task, s] : best) {
      const auto& row = row_where(report["tables"]["per_task"]["rows"], "task", task);
      if (s > 0) CHECK(row[label].get<double>() == doctest::Approx(s));
    }
  }
  // 8 samples per task against 12: said, not hidden.
  REQUIRE(report["warnings"].size() == 1);
  CHECK(report["warnings"][0].get<std::string>().find("budgets differ") != std::string::npos);
  CHECK(!report["tables"]["difficulty"]["rows"].empty());

  r = report_cli({bon.string(), ttt.string(), "--out", (scratch.path() / "both.html").string()});
  REQUIRE(r.exit_code == 0);
  const std::string html = test::read_file(scratch.path() / "both.html");
  CHECK(html.find("budgets differ") != std::string::npos);
  CHECK(html.find("<svg class=\"scatter\"") != std::string::npos);
}

TEST_CASE("crucible report: what is not a run, or an unknown format, is bad input (exit 2) with a plain message") {
  test::ScratchDir scratch("report-bad");
  auto r = report_cli({scratch.path().string()});
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("is not a run directory") != std::string::npos);
  r = report_cli({(scratch.path() / "missing").string()});
  CHECK(r.exit_code == 2);
  r = report_cli({scratch.path().string(), "--out", (scratch.path() / "x.pdf").string()});
  CHECK(r.exit_code == 2);
}

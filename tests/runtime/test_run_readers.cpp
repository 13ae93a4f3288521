// Reading run directories from elsewhere as data: files a record names are opened only when they are regular files
// inside the run; record lines that cannot be read are counted with their reasons, never silently; a run whose tasks
// directory is gone still loads; report text is escaped for Markdown and CSV.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>

#include "report/render.h"
#include "report/run_record.h"
#include "run/jsonl.h"
#include "run/log_reader.h"
#include "run/recorded_file.h"
#include "run/task_record.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

const std::string kExperiment =
    "[experiment]\nname = \"copied\"\nmode = \"best_of_n\"\n[tasks]\nnames = [\"relu\"]\n";

std::string candidate(int id, const std::string& task, const std::string& source_file, const std::string& extra = "") {
  return R"({"unit":"u","candidate_id":)" + std::to_string(id) + R"(,"task":")" + task +
         R"(","status":"correct","speedup":2.0,"reward":1.0,"source_file":")" + source_file + "\"" + extra + "}\n";
}

// A run directory made by hand: experiment.toml and seed-1 with the given candidates.jsonl text.
fs::path make_run(const fs::path& dir, const std::string& candidates, const std::string& experiment = kExperiment) {
  fs::create_directories(dir / "seed-1" / "sources");
  test::write_file(dir / "experiment.toml", experiment);
  test::write_file(dir / "seed-1" / "candidates.jsonl", candidates);
  return dir;
}

bool has_warning(const report::Report& r, const std::string& text) {
  return std::any_of(r.warnings.begin(), r.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("recorded sources: only a regular file inside the run directory, under the size cap, is read") {
  test::ScratchDir scratch("recorded-source");
  const fs::path run = scratch.path() / "run", outside = scratch.path() / "secret.txt";
  fs::create_directories(run / "sources");
  test::write_file(outside, "SECRET-MARKER");
  test::write_file(run / "sources" / "good.cpp", "int kernel;");
  CHECK(run::read_recorded_source(run, "sources/good.cpp") == "int kernel;");

  fs::create_symlink(outside, run / "sources" / "link.cpp");
  REQUIRE(::mkfifo((run / "sources" / "fifo.cpp").c_str(), 0600) == 0);  // no writer: a blocking open would hang
  fs::create_symlink("/dev/zero", run / "sources" / "zero.cpp");
  test::write_file(run / "sources" / "big.cpp", std::string(100, 'x'));
  fs::create_directories(scratch.path() / "elsewhere");
  test::write_file(scratch.path() / "elsewhere" / "x.cpp", "SECRET-MARKER");
  fs::create_directories(run / "linked");
  fs::create_directory_symlink(scratch.path() / "elsewhere", run / "sources" / "dir");
  const std::pair<std::string, std::string> refused[] = {
      {"sources/link.cpp", "symbolic link"},   {"sources/fifo.cpp", "not a regular file"},
      {"sources/zero.cpp", "symbolic link"},   {"sources/dir/x.cpp", "outside"},
      {"sources/../../secret.txt", "sources/"}, {"/etc/passwd", "sources/"},
      {"seed/../sources/good.cpp", "sources/"}, {"sources/missing.cpp", "cannot open"}};
  for (const auto& [file, why] : refused) {
    CAPTURE(file);
    try {
      run::read_recorded_source(run, file);
      FAIL("read");
    } catch (const run::RecordedFileError& e) {
      CHECK(std::string(e.what()).find(why) != std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS(run::read_recorded_source(run, "sources/big.cpp", 50), doctest::Contains("larger than 50"),
                       run::RecordedFileError);
}

TEST_CASE("report: a run's sources that are links, FIFOs or devices are not shown, and the report says so") {
  test::ScratchDir scratch("report-evil-source");
  const fs::path run = make_run(scratch.path() / "run", candidate(1, "relu", "sources/evil.cpp"));
  test::write_file(scratch.path() / "secret.txt", "SECRET-MARKER");
  fs::create_symlink(scratch.path() / "secret.txt", run / "seed-1" / "sources" / "evil.cpp");
  auto r = report::build_report({report::load_run(run)});
  REQUIRE(r.best.size() == 1);
  CHECK(r.best[0].source.empty());
  CHECK(has_warning(r, "symbolic link"));
  CHECK(report::render(r, report::Format::html).find("SECRET-MARKER") == std::string::npos);

  fs::remove(run / "seed-1" / "sources" / "evil.cpp");
  REQUIRE(::mkfifo((run / "seed-1" / "sources" / "evil.cpp").c_str(), 0600) == 0);
  r = report::build_report({report::load_run(run)});  // returns: a FIFO is refused, not waited on
  CHECK(has_warning(r, "not a regular file"));
}

TEST_CASE("report: unreadable record lines are skipped one by one, counted and said, whatever is wrong with them") {
  test::ScratchDir scratch("report-skipped");
  std::string lines;
  for (int i = 1; i <= 6; ++i)
    lines += candidate(i, "relu", "sources/a.cpp", i == 3 ? R"(,"policy_output":"bad \ud800 half")" : "");
  lines += "{}\n";                                          // well-formed JSON, not a record
  lines += R"({"candidate_id":8,"status":"no-such-status"})" "\n";
  lines += R"({"candidate_id":9,"task":"relu","sta)";      // torn last line
  const fs::path run = make_run(scratch.path() / "run", lines);
  const auto record = report::load_run(run);
  REQUIRE(record.seeds.size() == 1);
  CHECK(record.seeds[0].candidates.size() == 6);  // the lone surrogate costs nothing
  CHECK(record.repaired_lines == 1);
  REQUIRE(record.skipped.size() == 3);
  CHECK(record.skipped[0].line == 7);
  CHECK(record.skipped[0].why.find("without candidate_id or status") != std::string::npos);
  CHECK(record.skipped[1].line == 8);
  CHECK(record.skipped[1].why.find("unknown status") != std::string::npos);
  CHECK(record.skipped[2].line == 9);
  CHECK(record.skipped[2].why == "not JSON: cut short");
  const auto r = report::build_report({record});
  CHECK(has_warning(r, "3 record lines left out"));
  CHECK(has_warning(r, "seed-1/candidates.jsonl line 9 (not JSON: cut short)"));
  CHECK(has_warning(r, "lone UTF-16 surrogate"));
}

TEST_CASE("jsonl: lone surrogate escapes become U+FFFD, while pairs, escaped backslashes and text outside strings stay") {
  const std::pair<std::string, std::string> table[] = {
      {R"({"a":"x\ud800y"})", R"({"a":"x\ufffdy"})"},
      {R"({"a":"\udc00"})", R"({"a":"\ufffd"})"},
      {R"({"a":"\ud83d\ude00"})", R"({"a":"\ud83d\ude00"})"},
      {R"({"a":"\\ud800"})", R"({"a":"\\ud800"})"},
      {R"({"a":"\ud800\u0041"})", R"({"a":"\ufffd\u0041"})"},
      {R"({"a":"\"\ud800"})", R"({"a":"\"\ufffd"})"},
  };
  for (const auto& [line, repaired] : table) {
    CAPTURE(line);
    CHECK(run::replace_lone_surrogates(line) == repaired);
    CHECK(!nlohmann::json::parse(repaired, nullptr, false).is_discarded());
  }
}

TEST_CASE("report: a run whose tasks directory is gone loads from its own task record") {
  test::ScratchDir scratch("report-moved-tasks");
  const fs::path tasks = scratch.path() / "tasks";
  fs::create_directories(tasks);
  test::write_file(tasks / "relu.toml", test::read_file(fs::path(CRUCIBLE_SOURCE_DIR) / "configs/tasks/relu.toml"));
  // The tasks directory as a run started elsewhere wrote it: relative to a directory that is not this one.
  const fs::path run = make_run(scratch.path() / "run", candidate(1, "relu", "sources/a.cpp"),
                                kExperiment + "dir = \"../moved-away/tasks\"\n");
  eval::TaskSpec relu;
  relu.name = "relu";
  relu.level = 1;
  relu.sizes["cpu"] = {{"N", 1024}};
  relu.source_path = (tasks / "relu.toml").string();
  run::write_task_record(run, {relu});
  fs::remove_all(tasks);

  const auto record = report::load_run(run);
  CHECK(record.experiment.name == "copied");
  CHECK(record.experiment.tasks.dir == "../moved-away/tasks");
  CHECK(record.tasks == std::vector<std::string>{"relu"});
  const auto tasks_read = run::read_task_record(run);
  REQUIRE(tasks_read);
  REQUIRE(tasks_read->size() == 1);
  CHECK(tasks_read->front().sizes.at("cpu").at("N") == 1024);
  CHECK(tasks_read->front().text.find("relu") != std::string::npos);
}

TEST_CASE("report: an experiment error in a run's experiment.toml still names its line when tasks.dir was moved") {
  test::ScratchDir scratch("report-experiment-line");
  const fs::path run = make_run(scratch.path() / "run", "",
                                "[experiment]\nname = \"x\"\nmode = \"best_of_n\"\n[tasks]\nnames = [\"relu\"]\n"
                                "dir = '''\nnowhere\n'''\n[best_of_n]\nk = -1\n");
  CHECK_THROWS_WITH_AS(report::load_run(run), doctest::Contains(":10"), report::RunReadError);
}

TEST_CASE("report text: names stay text in Markdown and never start a formula in CSV") {
  report::Report r;
  r.runs = {"<img src=x onerror=alert(1)> (run)"};
  r.tables.push_back({"t", "T", "", {"run", "value"},
                      {{std::string("=HYPERLINK(\"http://x\")"), -0.5},
                       {std::string("@SUM(A1)"), 1.0},
                       {std::string("+1"), std::string("-2")},
                       {std::string("[a](javascript:x)|b"), 2.0}}});
  const std::string md = report::render(r, report::Format::md);
  CHECK(md.find("<img") == std::string::npos);
  CHECK(md.find("&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);
  CHECK(md.find("\\[a\\](javascript:x)\\|b") != std::string::npos);
  const std::string csv = report::render(r, report::Format::csv);
  CHECK(csv.find("t,\"'=HYPERLINK(\"\"http://x\"\")\",-0.5\n") != std::string::npos);
  CHECK(csv.find("t,'@SUM(A1),1\n") != std::string::npos);
  CHECK(csv.find("t,'+1,'-2\n") != std::string::npos);
}

TEST_CASE("report: runs compared that share no task are said to share none") {
  report::RunRecord a, b;
  a.dir = "/runs/a";
  a.experiment.name = "a";
  a.tasks = {"relu"};
  b.dir = "/runs/b";
  b.experiment.name = "b";
  b.tasks = {"gelu"};
  CHECK(has_warning(report::build_report({a, b}), "share no task"));
  b.tasks = {"gelu", "relu"};
  CHECK(!has_warning(report::build_report({a, b}), "share no task"));
}

TEST_CASE("logs: a directory with no logs, and that is no run, is refused rather than read as empty") {
  test::ScratchDir scratch("logs-empty");
  CHECK_THROWS_WITH_AS(run::find_log_dir(scratch.path()), doctest::Contains("holds no logs"), run::RunError);
  test::write_file(scratch.path() / "coordinator.log", "");
  CHECK(run::find_log_dir(scratch.path()) == scratch.path());  // a logs directory itself
}

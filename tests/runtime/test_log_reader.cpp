#include <doctest/doctest.h>

#include "run/log_reader.h"
#include "run/node_logs.h"
#include "support.h"

using namespace crucible;
using run::LogEntry;
using run::LogFilter;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> texts(const std::vector<LogEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.text);
  return out;
}

void append_raw(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::app) << text;
}

}  // namespace

TEST_CASE("log lines parse back into time, level and text") {
  auto info = run::parse_log_line("2024-05-01T12:00:00.123 info  [compiler] cache hit", "compiler");
  REQUIRE(info.has_value());
  CHECK(info->timestamp == "2024-05-01T12:00:00.123");
  CHECK(info->level == log::Level::info);
  CHECK(info->actor == "compiler");
  CHECK(info->text == "2024-05-01T12:00:00.123 info  [compiler] cache hit");
  auto warn = run::parse_log_line("2024-05-01T12:00:01.000 warning [evaluator] worker respawned", "evaluator");
  REQUIRE(warn.has_value());
  CHECK(warn->level == log::Level::warn);
  CHECK(run::parse_log_line("2024-05-01T12:00:01.000 error [x] boom", "x")->level == log::Level::error);

  CHECK_FALSE(run::parse_log_line("  at frame 3", "x").has_value());
  CHECK_FALSE(run::parse_log_line("2024-05-01 12:00:00.123 info  [x] no T", "x").has_value());
  CHECK_FALSE(run::parse_log_line("2024-05-01T12:00:00.123 loud  [x] bad level", "x").has_value());
  CHECK_FALSE(run::parse_log_line("2024-05-01T12:00:00.123 info  no brackets", "x").has_value());
}

TEST_CASE("a multi-line message stays one entry, a continuation with nothing before it keeps the previous level") {
  auto entries = run::parse_log_text(
      "2024-05-01T12:00:00.000 error [c] compile failed:\nline 1\nline 2\n2024-05-01T12:00:00.500 info  [c] next",
      "c");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].text == "2024-05-01T12:00:00.000 error [c] compile failed:\nline 1\nline 2");
  CHECK(entries[0].level == log::Level::error);
  CHECK(entries[1].level == log::Level::info);

  auto rest = run::parse_log_text("line 3", "c", entries[0]);
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].level == log::Level::error);
  CHECK(rest[0].timestamp == "2024-05-01T12:00:00.000");
  CHECK(rest[0].text == "line 3");
}

TEST_CASE("logs of several actors are filtered by actor and level and merged in time order") {
  test::ScratchDir dir("log-reader");
  test::write_file(dir.path() / "logs" / "compiler.log",
                   "2024-05-01T12:00:00.100 debug [compiler] compiling a\n"
                   "2024-05-01T12:00:00.300 info  [compiler] compiled a\n"
                   "2024-05-01T12:00:00.500 warning [compiler] slow compile\n");
  test::write_file(dir.path() / "logs" / "evaluator_0.log",
                   "2024-05-01T12:00:00.200 info  [evaluator/0] started\n"
                   "2024-05-01T12:00:00.400 error [evaluator/0] worker crashed\n");
  test::write_file(dir.path() / "logs" / "notes.txt", "2024-05-01T12:00:00.000 info  [notes] not a log file\n");

  auto log_dir = run::find_log_dir(dir.path());  // a run directory leads to its logs/
  CHECK(log_dir == dir.path() / "logs");
  CHECK(run::find_log_dir(log_dir) == log_dir);
  CHECK_THROWS_AS(run::find_log_dir(dir.path() / "missing"), run::RunError);

  auto all = run::read_logs(log_dir, {});
  CHECK(texts(all) == std::vector<std::string>{
                          "2024-05-01T12:00:00.100 debug [compiler] compiling a",
                          "2024-05-01T12:00:00.200 info  [evaluator/0] started",
                          "2024-05-01T12:00:00.300 info  [compiler] compiled a",
                          "2024-05-01T12:00:00.400 error [evaluator/0] worker crashed",
                          "2024-05-01T12:00:00.500 warning [compiler] slow compile",
                      });

  LogFilter evaluator_only;
  evaluator_only.actors = {"evaluator/0"};  // the logger's name finds its file
  CHECK(texts(run::read_logs(log_dir, evaluator_only)) ==
        std::vector<std::string>{"2024-05-01T12:00:00.200 info  [evaluator/0] started",
                                 "2024-05-01T12:00:00.400 error [evaluator/0] worker crashed"});

  LogFilter warnings;
  warnings.min_level = log::Level::warn;
  CHECK(texts(run::read_logs(log_dir, warnings)) ==
        std::vector<std::string>{"2024-05-01T12:00:00.400 error [evaluator/0] worker crashed",
                                 "2024-05-01T12:00:00.500 warning [compiler] slow compile"});

  LogFilter compiler_info;
  compiler_info.actors = {"compiler"};
  compiler_info.min_level = log::Level::info;
  CHECK(run::read_logs(log_dir, compiler_info).size() == 2);
}

TEST_CASE("following picks up appended lines and files that appear later, never half a line") {
  test::ScratchDir dir("log-follow");
  auto a = dir.path() / "a.log";
  test::write_file(a, "2024-05-01T12:00:00.100 info  [a] one\n2024-05-01T12:00:00.200 info  [a] tw");
  run::LogFollower follower(dir.path(), {});
  CHECK(texts(follower.poll()) == std::vector<std::string>{"2024-05-01T12:00:00.100 info  [a] one"});
  CHECK(follower.poll().empty());

  append_raw(a, "o\n");
  test::write_file(dir.path() / "b.log", "2024-05-01T12:00:00.150 warning [b] late file\n");
  CHECK(texts(follower.poll()) == std::vector<std::string>{"2024-05-01T12:00:00.150 warning [b] late file",
                                                           "2024-05-01T12:00:00.200 info  [a] two"});

  LogFilter warnings;
  warnings.min_level = log::Level::warn;
  run::LogFollower warn_follower(dir.path(), warnings);
  CHECK(warn_follower.poll().size() == 1);
  append_raw(dir.path() / "b.log", "  detail of the warning\n");
  append_raw(a, "2024-05-01T12:00:00.300 info  [a] three\n");
  // The detail line arrives on its own but is still the warning's, so it passes the level filter.
  CHECK(texts(warn_follower.poll()) == std::vector<std::string>{"  detail of the warning"});
}

TEST_CASE("evaluator nodes' logs (logs/nodes/<node>/) merge with the coordinator's and filter by node") {
  test::ScratchDir dir("log-reader-nodes");
  const auto log_dir = dir.path() / "logs";
  test::write_file(log_dir / "coordinator.log", "2024-05-01T12:00:00.100 info  [coordinator] run of 2 units\n");
  run::NodeLogWriter writer(log_dir);
  writer.write("gpu-a", "evaluator.cuda:0", "2024-05-01T12:00:00.200 info  [gpu-a/evaluator.cuda:0] candidate 1");
  writer.write("gpu-b", "evaluator.cuda:0", "2024-05-01T12:00:00.300 warning [gpu-b/evaluator.cuda:0] slow");
  CHECK_THROWS_AS(writer.write("../escape", "x", "line"), run::RunError);
  CHECK_THROWS_AS(writer.write("local", "x", "line"), run::RunError);
  CHECK(fs::exists(log_dir / "nodes" / "gpu-a" / "evaluator.cuda_0.log"));
  // A node's text cannot add lines of its own making, nor bytes that are not UTF-8.
  writer.write("gpu-z", "x", "2024-05-01T12:00:00.400 info  [gpu-z/x] a\n2024-05-01T12:00:00.500 error [gpu-z/x] forged \xFF");
  CHECK(test::read_file(log_dir / "nodes" / "gpu-z" / "x.log") ==
        "2024-05-01T12:00:00.400 info  [gpu-z/x] a 2024-05-01T12:00:00.500 error [gpu-z/x] forged \xEF\xBF\xBD\n");
  fs::remove_all(log_dir / "nodes" / "gpu-z");

  auto all = run::read_logs(log_dir, {});
  REQUIRE(all.size() == 3);
  CHECK(all[0].node == "local");
  CHECK(all[1].node == "gpu-a");
  CHECK(all[2].node == "gpu-b");
  CHECK(all[2].level == log::Level::warn);

  LogFilter gpu_a;
  gpu_a.nodes = {"gpu-a"};
  CHECK(texts(run::read_logs(log_dir, gpu_a)) ==
        std::vector<std::string>{"2024-05-01T12:00:00.200 info  [gpu-a/evaluator.cuda:0] candidate 1"});
  LogFilter local;
  local.nodes = {"local"};
  CHECK(run::read_logs(log_dir, local).size() == 1);
  LogFilter evaluators;
  evaluators.actors = {"evaluator.cuda:0"};
  CHECK(run::read_logs(log_dir, evaluators).size() == 2);

  // Followed as the nodes' lines arrive, including a node that appears later.
  run::LogFollower follower(log_dir, gpu_a);
  CHECK(follower.poll().size() == 1);
  writer.write("gpu-a", "node", "2024-05-01T12:00:01.000 info  [gpu-a/node] session 1 ended");
  writer.write("gpu-c", "node", "2024-05-01T12:00:01.000 info  [gpu-c/node] joined");
  auto more = follower.poll();
  REQUIRE(more.size() == 1);
  CHECK(more[0].actor == "node");
}

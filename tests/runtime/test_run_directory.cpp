#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "run/jsonl.h"
#include "run/run_directory.h"
#include "support.h"

using namespace crucible;
using run::RunDirectory;
using run::RunError;

namespace {

std::vector<std::string> units_of(const std::filesystem::path& file) {
  std::vector<std::string> units;
  for (const auto& j : run::read_jsonl(file)) units.push_back(j.at("unit"));
  return units;
}

void append_raw(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::app) << text;
}

}  // namespace

TEST_CASE("a run directory round trip: create, record, commit, resume") {
  test::ScratchDir scratch("run-dir");
  auto dir = scratch.path() / "run";
  const std::string experiment = "[run]\nname = \"demo\"\n";
  std::string hash;
  {
    auto run = RunDirectory::create(dir, experiment);
    CHECK(run.dir() == dir);
    // No logs/ per seed: the run logs once, into its top-level logs/, every seed together (crucible logs --seed).
    CHECK(!std::filesystem::exists(dir / "logs"));
    CHECK(run.experiment_text() == experiment);
    CHECK(run.committed().empty());
    CHECK_FALSE(run.last_policy_snapshot().has_value());

    hash = run.write_source("int main() {}", ".cpp");
    CHECK(hash == "00096d96da5299e65479678a8e79b07ab36e6185120e892a1360e1be25e84fbb");
    CHECK(run.write_source("int main() {}", "cpp") == hash);  // stored once, same name
    CHECK(test::read_file(dir / "sources" / (hash + ".cpp")) == "int main() {}");

    run.append_candidate("seed=1/step=1", R"({"task": "relu", "source": ")" + hash + R"("})");
    run.append_candidate("seed=1/step=1", R"({"task": "gelu"})");
    run.commit("seed=1/step=1", R"({"reward_mean": 0.5})", R"({"version": 1})");
    run.append_candidate("seed=1/step=2", R"({"task": "relu"})");
    run.commit("seed=1/step=2", R"({"reward_mean": 0.75})", "");
    CHECK(run.is_committed("seed=1/step=2"));
    CHECK(run.committed() == std::vector<std::string>{"seed=1/step=1", "seed=1/step=2"});
    // The snapshot of commit 1 is still the last one: commit 2 had none.
    CHECK(run.last_policy_snapshot() == std::optional<std::string>(R"({"version": 1})"));
    CHECK(std::filesystem::exists(dir / "policy" / "1.json"));
    CHECK_FALSE(std::filesystem::exists(dir / "policy" / "2.json"));
  }

  auto candidates = run::read_jsonl(dir / "candidates.jsonl");
  REQUIRE(candidates.size() == 3);
  CHECK(candidates[0]["unit"] == "seed=1/step=1");
  CHECK(candidates[0]["task"] == "relu");
  CHECK(candidates[0]["source"] == hash);
  CHECK(candidates[2]["unit"] == "seed=1/step=2");
  auto steps = run::read_jsonl(dir / "steps.jsonl");
  REQUIRE(steps.size() == 2);
  CHECK(steps[1]["unit"] == "seed=1/step=2");
  CHECK(steps[1]["reward_mean"] == 0.75);
  auto journal = run::read_jsonl(dir / "journal.jsonl");
  REQUIRE(journal.size() == 2);
  CHECK(journal[0]["event"] == "commit");
  CHECK(journal[1]["index"] == 2);

  auto resumed = RunDirectory::resume(dir);
  CHECK(resumed.experiment_text() == experiment);
  CHECK(resumed.committed() == std::vector<std::string>{"seed=1/step=1", "seed=1/step=2"});
  CHECK(resumed.is_committed("seed=1/step=1"));
  CHECK_FALSE(resumed.is_committed("seed=1/step=3"));
  CHECK(resumed.last_policy_snapshot() == std::optional<std::string>(R"({"version": 1})"));
  CHECK(run::read_jsonl(dir / "candidates.jsonl").size() == 3);

  // Going on after a resume numbers commits on from where the run stopped.
  resumed.commit("seed=1/step=3", "{}", R"({"version": 3})");
  CHECK(test::read_file(dir / "policy" / "3.json") == R"({"version": 3})");
  CHECK(RunDirectory::resume(dir).last_policy_snapshot() == std::optional<std::string>(R"({"version": 3})"));
}

TEST_CASE("resume drops every line of a unit that was in flight at the crash") {
  test::ScratchDir scratch("run-inflight");
  auto dir = scratch.path() / "run";
  {
    auto run = RunDirectory::create(dir, "x = 1\n");
    run.append_candidate("seed=1/step=1", R"({"n": 1})");
    run.commit("seed=1/step=1", R"({"m": 1})", R"({"v": 1})");
    run.append_candidate("seed=1/step=2", R"({"n": 2})");
    run.append_candidate("seed=2/step=1", R"({"n": 3})");
  }
  // What a crash half-way through commit 2 leaves: its metrics line and snapshot but no journal line, plus torn
  // half-lines and a temporary file.
  append_raw(dir / "steps.jsonl", R"({"unit":"seed=1/step=2","m":2})" "\n");
  append_raw(dir / "candidates.jsonl", R"({"unit":"seed=1/step=1","n":)");
  test::write_file(dir / "policy" / "2.json", R"({"v": 2})");
  test::write_file(dir / "sources" / "abc.cpp.tmp.1.0", "half a source");

  auto run = RunDirectory::resume(dir);
  CHECK(run.committed() == std::vector<std::string>{"seed=1/step=1"});
  CHECK(units_of(dir / "candidates.jsonl") == std::vector<std::string>{"seed=1/step=1"});
  CHECK(units_of(dir / "steps.jsonl") == std::vector<std::string>{"seed=1/step=1"});
  CHECK_FALSE(std::filesystem::exists(dir / "policy" / "2.json"));
  CHECK_FALSE(std::filesystem::exists(dir / "sources" / "abc.cpp.tmp.1.0"));
  CHECK(run.last_policy_snapshot() == std::optional<std::string>(R"({"v": 1})"));

  // The unit is redone from scratch and leaves exactly one copy of each line.
  run.append_candidate("seed=1/step=2", R"({"n": 2})");
  run.commit("seed=1/step=2", R"({"m": 2})", "");
  CHECK(units_of(dir / "candidates.jsonl") == std::vector<std::string>{"seed=1/step=1", "seed=1/step=2"});
  CHECK(units_of(dir / "steps.jsonl") == std::vector<std::string>{"seed=1/step=1", "seed=1/step=2"});
}

TEST_CASE("a torn last journal line is ignored and cut off, so later commits stay readable") {
  test::ScratchDir scratch("run-torn");
  auto dir = scratch.path() / "run";
  {
    auto run = RunDirectory::create(dir, "");
    run.commit("a", "{}", "");
  }
  append_raw(dir / "journal.jsonl", R"({"event":"commit","index":2,"un)");
  {
    auto run = RunDirectory::resume(dir);
    CHECK(run.committed() == std::vector<std::string>{"a"});
    run.commit("b", "{}", "");
  }
  auto run = RunDirectory::resume(dir);
  CHECK(run.committed() == std::vector<std::string>{"a", "b"});
  CHECK(run::read_jsonl(dir / "journal.jsonl").size() == 2);
}

TEST_CASE("a corrupt line in the middle of the journal is an error, not silently skipped") {
  test::ScratchDir scratch("run-corrupt");
  auto dir = scratch.path() / "run";
  { RunDirectory::create(dir, "").commit("a", "{}", ""); }
  auto good = test::read_file(dir / "journal.jsonl");
  test::write_file(dir / "journal.jsonl", "garbage\n" + good);
  CHECK_THROWS_AS(RunDirectory::resume(dir), RunError);
}

TEST_CASE("a unit is committed once, and nothing is added to it afterwards") {
  test::ScratchDir scratch("run-twice");
  auto run = RunDirectory::create(scratch.path() / "run", "");
  run.commit("seed=1/task=relu/step=4", R"({"m": 1})", "");
  CHECK_THROWS_AS(run.commit("seed=1/task=relu/step=4", R"({"m": 2})", ""), RunError);
  CHECK_THROWS_AS(run.append_candidate("seed=1/task=relu/step=4", "{}"), RunError);
  CHECK(units_of(scratch.path() / "run" / "steps.jsonl").size() == 1);
  CHECK(run.committed().size() == 1);
}

TEST_CASE("records must be JSON objects of their own unit") {
  test::ScratchDir scratch("run-records");
  auto run = RunDirectory::create(scratch.path() / "run", "");
  CHECK_THROWS_AS(run.append_candidate("u", "[1, 2]"), RunError);
  CHECK_THROWS_AS(run.append_candidate("u", "{not json"), RunError);
  CHECK_THROWS_AS(run.append_candidate("u", R"({"unit": "v"})"), RunError);
  CHECK_THROWS_AS(run.commit("u", "3", ""), RunError);
  CHECK_FALSE(run.is_committed("u"));
  run.append_candidate("u", R"({"unit": "u", "k": 1})");
  CHECK(run::read_jsonl(scratch.path() / "run" / "candidates.jsonl").at(0) == nlohmann::json{{"unit", "u"}, {"k", 1}});
}

TEST_CASE("create refuses a directory in use, resume refuses one that is not a run") {
  test::ScratchDir scratch("run-refuse");
  test::write_file(scratch.path() / "used" / "something.txt", "x");
  CHECK_THROWS_AS(RunDirectory::create(scratch.path() / "used", ""), RunError);
  CHECK(test::read_file(scratch.path() / "used" / "something.txt") == "x");
  std::filesystem::create_directories(scratch.path() / "empty");
  CHECK_NOTHROW(RunDirectory::create(scratch.path() / "empty", ""));

  CHECK_THROWS_AS(RunDirectory::resume(scratch.path() / "used"), RunError);
  CHECK_THROWS_AS(RunDirectory::resume(scratch.path() / "missing"), RunError);
}

TEST_CASE("a run directory can be moved, and written from several threads at once") {
  test::ScratchDir scratch("run-threads");
  auto created = RunDirectory::create(scratch.path() / "run", "");
  RunDirectory run = std::move(created);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&run, t] {
      for (int i = 0; i < 50; ++i) {
        run.write_source("shared source", "cpp");
        run.append_candidate("unit-" + std::to_string(t), R"({"i": )" + std::to_string(i) + "}");
      }
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) run.commit("unit-" + std::to_string(t), "{}", "");
  CHECK(run::read_jsonl(scratch.path() / "run" / "candidates.jsonl").size() == 200);
  std::size_t sources = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(scratch.path() / "run" / "sources"))
    ++sources;
  CHECK(sources == 1);
  CHECK(RunDirectory::resume(scratch.path() / "run").committed().size() == 4);
}

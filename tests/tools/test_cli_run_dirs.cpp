// The CLI on run directories from elsewhere: report, show and sft-data never read a source through a link or wait
// on a FIFO; report says on stderr what it left out; logs, run --resume and tasks import refuse bad input plainly.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <regex>

#include "cli_support.h"
#include "support.h"

using namespace crucible;
using test::crucible_cli;
namespace fs = std::filesystem;

namespace {

const std::string kExperiment = "[experiment]\nname = \"copied\"\nmode = \"best_of_n\"\n[tasks]\nnames = [\"relu\"]\n";

// A run made by hand with one correct candidate whose source is `sources/evil.cpp`, and a secret outside the run.
fs::path run_with_evil_source(const test::ScratchDir& scratch, const std::string& extra_lines = "") {
  const fs::path run = scratch.path() / "run";
  fs::create_directories(run / "seed-1" / "sources");
  test::write_file(run / "experiment.toml", kExperiment);
  test::write_file(run / "seed-1" / "candidates.jsonl",
                   R"({"unit":"u","candidate_id":7,"task":"relu","status":"correct","speedup":2.0,"reward":1.0,)"
                   R"("source_file":"sources/evil.cpp"})" "\n" + extra_lines);
  test::write_file(scratch.path() / "secret.txt", "SECRET-MARKER");
  fs::create_symlink(scratch.path() / "secret.txt", run / "seed-1" / "sources" / "evil.cpp");
  return run;
}

}  // namespace

TEST_CASE("crucible report, show and sft-data: a source that is a link or a FIFO is neither read nor waited on") {
  test::ScratchDir scratch("cli-evil-source");
  const fs::path run = run_with_evil_source(scratch);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    if (round == 1) {  // the same name as a FIFO with no writer
      fs::remove(run / "seed-1" / "sources" / "evil.cpp");
      REQUIRE(::mkfifo((run / "seed-1" / "sources" / "evil.cpp").c_str(), 0600) == 0);
    }
    auto r = crucible_cli({"report", run.string(), "--out", "-", "--format", "md"}, "/tmp/unused-cache", 60);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("SECRET-MARKER") == std::string::npos);
    CHECK(r.output.find("warning:") != std::string::npos);
    r = crucible_cli({"show", run.string(), "7"}, "/tmp/unused-cache", 60);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("SECRET-MARKER") == std::string::npos);
    CHECK(r.output.find("source: not shown") != std::string::npos);
    const fs::path pairs = scratch.path() / "pairs.jsonl";
    r = crucible_cli({"sft-data", run.string(), "--out", pairs.string()}, "/tmp/unused-cache", 60);
    CHECK(r.exit_code == 1);  // no kernel it may read
    CHECK(r.output.find("skipped:") != std::string::npos);
    CHECK(test::read_file(pairs).find("SECRET-MARKER") == std::string::npos);
  }
}

TEST_CASE("crucible report says on stderr which record lines it left out, and reports the rest") {
  test::ScratchDir scratch("cli-report-skipped");
  const fs::path run = run_with_evil_source(scratch, "{}\n{\"candidate_id\":8,\"sta");
  const auto r = crucible_cli({"report", run.string(), "--out", (scratch.path() / "r.json").string()},
                              "/tmp/unused-cache", 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("warning: copied (run): 2 record lines left out") != std::string::npos);
  CHECK(test::read_file(scratch.path() / "r.json").find("2 record lines left out") != std::string::npos);
}

TEST_CASE("crucible logs on a directory without logs, and run --resume on one that holds only an experiment, refuse") {
  test::ScratchDir scratch("cli-refusals");
  auto r = crucible_cli({"logs", scratch.path().string()}, "/tmp/unused-cache", 60);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("holds no logs") != std::string::npos);

  test::write_file(scratch.path() / "experiment.toml", kExperiment + "[best_of_n]\nk = 2\ngroup_size = 2\n");
  r = crucible_cli({"run", "--resume", scratch.path().string(), "--quiet"}, (scratch.path() / "cache").string(), 300);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("nothing to resume") != std::string::npos);
  CHECK(!fs::exists(scratch.path() / "seed-1"));
  CHECK(!fs::exists(scratch.path() / "starts.jsonl"));
}

TEST_CASE("crucible tasks import --jobs 0 names the allowed range in a few digits") {
  test::ScratchDir scratch("cli-jobs");
  const auto r = crucible_cli({"tasks", "import", "--kernelbench", scratch.path().string(), "--out",
                               (scratch.path() / "out").string(), "--jobs", "0"},
                              "/tmp/unused-cache", 60);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("--jobs") != std::string::npos);
  CHECK(r.output.find("256") != std::string::npos);
  CHECK(!std::regex_search(r.output, std::regex("[0-9]{12}")));
}

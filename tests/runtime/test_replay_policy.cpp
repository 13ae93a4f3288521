// The replay policy hands out the files written in the run's candidate language, and only those.
#include <doctest/doctest.h>

#include <fstream>

#include "crucible/eval/candidate_language.h"
#include "crucible/eval/task_spec.h"
#include "policy/replay_policy.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;

TEST_CASE("replay policy: each candidate language replays the files of its own source extension") {
  test::ScratchDir scratch("replay-policy");
  fs::create_directories(scratch.path() / "relu");
  for (const char* name : {"a.cpp", "b.cu", "c.py", "notes.txt"}) std::ofstream(scratch.path() / "relu" / name) << name;
  struct Row {
    eval::CandidateLanguage language;
    std::string file;
  };
  const Row rows[] = {
      {eval::CandidateLanguage::cpp(), "a.cpp"},
      {eval::CandidateLanguage::cuda_cpp(), "b.cu"},
      {eval::CandidateLanguage::triton(), "c.py"},
      {{eval::Backend::cpu, eval::CandidateKind::kernelbench}, "c.py"},
  };
  eval::TaskSpec relu;
  relu.name = "relu";
  for (const auto& row : rows) {
    CAPTURE(row.language.name());
    policy::ReplayPolicy replay(scratch.path(), row.language);
    const auto files = replay.files_for("relu");
    REQUIRE(files.size() == 1);
    CHECK(files[0].filename() == row.file);
    CHECK(replay.sample(relu, 1).at(0).source == row.file);
  }
  policy::ReplayPolicy replay(scratch.path(), eval::CandidateLanguage::cpp());
  eval::TaskSpec gelu;
  gelu.name = "gelu";
  CHECK_THROWS_AS(replay.sample(gelu, 1), std::invalid_argument);  // no files for it: an error naming the folder
}

// LLM-as-judge, the plain part: the documented reply format read from what models actually write, and the schedule.
#include <doctest/doctest.h>

#include "judge/judge_reply.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;

TEST_CASE("judge replies: the first JSON object with a numeric score in 0..1 counts, wherever it is") {
  struct Row {
    const char* reply;
    std::optional<double> score;
    const char* reason_or_why;
  };
  const Row rows[] = {
      {R"({"score": 0.8, "reason": "tiled and vectorised"})", 0.8, "tiled and vectorised"},
      {"Here is my verdict:\n```json\n{\"score\": 1, \"reason\": \"fine\"}\n```", 1.0, "fine"},
      {R"(Thinking {about it}... {"reason": "a brace } in a string", "score": 0.25})", 0.25, "a brace } in a string"},
      {R"({"score": 0})", 0.0, ""},
      {R"({"score": 1.5, "reason": "too generous"})", std::nullopt, "outside 0..1"},
      {R"({"score": "high"})", std::nullopt, "no JSON object"},
      {"no json at all", std::nullopt, "no JSON object"},
      {R"({"score": 0.5)", std::nullopt, "no JSON object"},  // cut off
  };
  for (const auto& row : rows) {
    CAPTURE(row.reply);
    std::string why;
    const auto got = judge::parse_judge_reply(row.reply, why);
    REQUIRE(got.has_value() == row.score.has_value());
    if (got) {
      CHECK(got->score == doctest::Approx(*row.score));
      CHECK(got->reason == row.reason_or_why);
    } else {
      CHECK(why.find(row.reason_or_why) != std::string::npos);
    }
  }
}

TEST_CASE("judge schedule and prompt: groups below the correct share are judged, the prompt holds code and verdict") {
  CHECK(judge::judge_group(0.0, 1.0));
  CHECK(judge::judge_group(0.5, 1.0));
  CHECK_FALSE(judge::judge_group(1.0, 1.0));  // all correct: speedups speak for themselves
  CHECK_FALSE(judge::judge_group(0.5, 0.5));
  CHECK(judge::judge_group(1.0, 1.5));        // above 1: always
  eval::Verdict v;
  v.status = eval::Status::incorrect;
  v.reasons.push_back({eval::ReasonCode::mismatch, "differs at 3 elements"});
  const auto prompt = judge::judge_prompt(tasks::find_task("relu", test::tasks_dir()), "THE_SOURCE", v);
  CHECK(prompt.find("Task: relu") != std::string::npos);
  CHECK(prompt.find("THE_SOURCE") != std::string::npos);
  CHECK(prompt.find("status: incorrect (mismatch)") != std::string::npos);
  CHECK(prompt.find("{\"score\"") != std::string::npos);
}

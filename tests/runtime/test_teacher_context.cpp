// What a self-distillation teacher reads (SDPO): each sample's own verdict, or the best correct sibling of its
// group, never itself.
#include <doctest/doctest.h>

#include "policy/teacher_context.h"

using namespace crucible;
using policy::TeacherFeedback;

namespace {

eval::Verdict verdict(eval::Status status, std::optional<double> speedup = std::nullopt) {
  eval::Verdict v;
  v.status = status;
  v.speedup = speedup;
  if (status == eval::Status::incorrect) v.reasons.push_back({eval::ReasonCode::mismatch, "output y differs at 3 elements"});
  return v;
}

}  // namespace

TEST_CASE("teacher context: execution feedback is each sample's own verdict") {
  const auto wrong = verdict(eval::Status::incorrect), right = verdict(eval::Status::correct, 1.5);
  const auto contexts = policy::teacher_contexts({{&wrong, "code A", 0.0}, {&right, "code B", 1.5}, {nullptr, "", 0}},
                                                 TeacherFeedback::execution, eval::CandidateLanguage::cpp());
  REQUIRE(contexts.size() == 3);
  CHECK(contexts[0].find("status: incorrect (mismatch)") != std::string::npos);
  CHECK(contexts[0].find("differs at 3 elements") != std::string::npos);
  CHECK(contexts[0].find("code A") == std::string::npos);  // feedback only: the teacher reads the code as the reply
  CHECK(contexts[1].find("speedup over the reference: 1.500x") != std::string::npos);
  CHECK(contexts[2].empty());  // no verdict (never evaluated): no teacher
}

TEST_CASE("teacher context: a successful sibling teaches the others, the best is taught by the second best") {
  const auto wrong = verdict(eval::Status::incorrect), slow = verdict(eval::Status::correct, 1.1),
             fast = verdict(eval::Status::correct, 2.0), failed = verdict(eval::Status::compile_error);
  struct Row {
    std::vector<policy::GroupAttempt> group;
    std::vector<std::string> expect;  // the sibling's code each member reads ("" : no teacher)
  };
  const std::vector<Row> table = {
      {{{&wrong, "W", 0.0}, {&fast, "FAST", 2.0}, {&slow, "SLOW", 1.1}, {&failed, "F", -1}},
       {"FAST", "SLOW", "FAST", "FAST"}},
      {{{&wrong, "W", 0.0}, {&fast, "ONLY", 2.0}}, {"ONLY", ""}},  // the only correct one has no one to learn from
      {{{&wrong, "W1", 0.0}, {&failed, "W2", -1}}, {"", ""}},     // nothing correct: no teacher at all
      {{{&slow, "FIRST", 1.0}, {&slow, "SECOND", 1.0}}, {"SECOND", "FIRST"}},  // ties: the earlier one ranks first
  };
  for (const auto& row : table) {
    const auto contexts =
        policy::teacher_contexts(row.group, TeacherFeedback::successful_sibling, eval::CandidateLanguage::cuda_cpp());
    REQUIRE(contexts.size() == row.expect.size());
    for (std::size_t i = 0; i < contexts.size(); ++i) {
      CAPTURE(i);
      if (row.expect[i].empty()) {
        CHECK(contexts[i].empty());
      } else {
        CHECK(contexts[i].find("```cuda\n" + row.expect[i] + "\n```") != std::string::npos);
        CHECK(contexts[i].find("A correct kernel for this task") == 0);
      }
    }
  }
}

TEST_CASE("teacher context: names parse both ways, others are refused") {
  for (auto k : {TeacherFeedback::execution, TeacherFeedback::successful_sibling})
    CHECK(policy::parse_teacher_feedback(policy::teacher_feedback_name(k)) == k);
  CHECK(!policy::parse_teacher_feedback("sibling"));
}

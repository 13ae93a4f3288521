// Reason codes are values inside the process and today's names in JSON, so records of earlier runs still read.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "crucible/eval/reason_code.h"
#include "crucible/eval/verdict.h"
#include "crucible/eval/verdict_json.h"

using namespace crucible::eval;

TEST_CASE("every reason code has one name, and each name reads back as its code") {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(ReasonCode::unrecognized); ++i) {
    const auto code = static_cast<ReasonCode>(i);
    const std::string name(reason_code_name(code));
    INFO("code ", i, " named '", name, "'");
    CHECK_FALSE(name.empty());
    CHECK(names.insert(name).second);
    CHECK(parse_reason_code(name) == code);
  }
  CHECK_FALSE(parse_reason_code("Mismatch").has_value());
  CHECK_FALSE(parse_reason_code("").has_value());
}

TEST_CASE("reason codes keep the names records have always carried") {
  const std::pair<ReasonCode, const char*> rows[] = {
      {ReasonCode::mismatch, "mismatch"},
      {ReasonCode::input_mutated, "input_mutated"},
      {ReasonCode::forbidden_import, "forbidden_import"},
      {ReasonCode::compiler_error, "compiler_error"},
      {ReasonCode::timing_noisy, "timing_noisy"},
      {ReasonCode::timing_tampered, "timing_tampered"},  // given by earlier versions only
      {ReasonCode::evaluation_budget, "evaluation_budget"},
      {ReasonCode::policy_error, "policy_error"},
      {ReasonCode::no_source, "no_source"},
      {ReasonCode::evaluator_error, "evaluator_error"},
  };
  for (const auto& [code, name] : rows) CHECK(reason_code_name(code) == name);
}

TEST_CASE("a reason read from text keeps a name this build does not know in its detail") {
  const Reason known = reason_from_text("skipped_work", "timed call 3");
  CHECK(known.code == ReasonCode::skipped_work);
  CHECK(known.detail == "timed call 3");
  const Reason later = reason_from_text("a_later_code", "what it said");
  CHECK(later.code == ReasonCode::unrecognized);
  CHECK(later.detail == "a_later_code: what it said");
}

TEST_CASE("a verdict's JSON names its device, mode and reasons as records always have") {
  Verdict evaluated;
  evaluated.status = Status::incorrect;
  evaluated.device = Device::cuda(1);
  evaluated.mode = EvalDepth::full;
  evaluated.reasons.push_back({ReasonCode::nondeterministic, "two calls differ"});
  const std::string text = to_json(evaluated, -1);
  CHECK(text.find("\"device\":\"cuda:1\"") != std::string::npos);
  CHECK(text.find("\"mode\":\"full\"") != std::string::npos);
  CHECK(text.find("\"code\":\"nondeterministic\"") != std::string::npos);

  // A reply with no source is never evaluated: the record names the policy, and no mode.
  const Verdict unparsed = verdict_without_evaluation("relu", std::nullopt, Status::parse_error, ReasonCode::no_source,
                                                      "no code block");
  const std::string unparsed_text = to_json(unparsed, -1);
  CHECK(unparsed_text.find("\"device\":\"policy\"") != std::string::npos);
  CHECK(unparsed_text.find("\"mode\":\"\"") != std::string::npos);
  CHECK(unparsed_text.find("\"code\":\"no_source\"") != std::string::npos);
  CHECK(unparsed.has_reason(ReasonCode::no_source));
  CHECK_FALSE(unparsed.has_reason(ReasonCode::policy_error));
}

// The evaluator's feedback for a refinement turn: what each verdict says, in the documented text, bounded.
#include <doctest/doctest.h>

#include <string>

#include "crucible/eval/utf8_text.h"
#include "policy/feedback.h"

using namespace crucible;

namespace {

eval::Verdict verdict(eval::Status status) {
  eval::Verdict v;
  v.status = status;
  return v;
}

}  // namespace

TEST_CASE("feedback text: each verdict says its status, the first reason and what to do next") {
  struct Row {
    const char* name;
    eval::Verdict verdict;
    std::vector<std::string> contains;
    std::vector<std::string> absent;
  };
  auto correct = verdict(eval::Status::correct);
  correct.speedup = 1.2345;
  auto gpu = correct;
  gpu.kernel_coverage = 0.875;
  auto mismatch = verdict(eval::Status::incorrect);
  mismatch.reasons.push_back({eval::ReasonCode::mismatch, "trial 0: output y differs at 12 elements (max abs error 0.5)"});
  mismatch.speedup = 9.0;  // never shown for a wrong kernel
  auto build = verdict(eval::Status::compile_error);
  build.reasons.push_back({eval::ReasonCode::compiler_error, "the compiler failed"});
  build.compile.log_excerpt = "candidate.cpp:3:1: error: expected ';'";
  const Row rows[] = {
      {"correct on a CPU", correct,
       {"status: correct\n", "speedup over the reference: 1.234x", "kernel time coverage: unavailable",
        "Write a faster kernel"},
       {"detail:", "compiler output"}},
      {"correct on a GPU", gpu, {"kernel time coverage: 87.5% of GPU time in your own kernels"}, {"unavailable"}},
      {"a mismatch", mismatch,
       {"status: incorrect (mismatch)", "detail: trial 0: output y differs at 12 elements", "Fix the kernel"},
       {"speedup"}},
      {"a compile error", build,
       {"status: compile_error (compiler_error)", "compiler output:\ncandidate.cpp:3:1: error: expected ';'"}, {}},
  };
  for (const auto& row : rows) {
    const std::string text = policy::feedback_text(policy::feedback_of(row.verdict));
    INFO(row.name, ":\n", text);
    for (const auto& s : row.contains) CHECK(text.find(s) != std::string::npos);
    for (const auto& s : row.absent) CHECK(text.find(s) == std::string::npos);
  }
}

TEST_CASE("feedback text from hostile compiler output is bounded, valid UTF-8 and free of control characters") {
  auto v = verdict(eval::Status::compile_error);
  std::string log;
  for (int i = 0; i < 2000; ++i) log += "err\x1b[31m\xff\xfe line " + std::to_string(i) + "\r\n";
  v.compile.log_excerpt = log;
  v.reasons.push_back({eval::ReasonCode::compiler_error, std::string(5000, 'd')});
  const std::string text = policy::feedback_text(policy::feedback_of(v));
  CHECK(text.size() < 2200);
  CHECK(eval::valid_utf8(text) == text);
  for (unsigned char c : text) CHECK((c >= 0x20 || c == '\n' || c == '\t'));
  CHECK(text.find("[...]") != std::string::npos);  // cut, and says so
}

// Triton candidates on a real GPU: the naive candidates are correct, every Triton fixture gets its exact verdict
// (the gate's refusals and the run-time checks alike), and the worker recovers after faults. Where this node has no
// Python with PyTorch and Triton, the cases say so and are skipped.
#include <doctest/doctest.h>

#include <filesystem>

#include "crucible/eval/evaluator.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/verdict_json.h"
#include "eval_support.h"
#include "tasks/task_loader.h"

using namespace crucible;

namespace {

std::string triton_fixture(const std::string& name) {
  return test::read_file(test::source_dir() / "tests" / "fixtures" / "triton" / (name + ".py"));
}
std::string triton_candidate(const std::string& task) {
  return test::read_file(test::source_dir() / "configs" / "candidates" / "triton" / (task + ".py"));
}

eval::EvalOptions triton_options(const std::string& sizes) {
  auto o = test::gpu_options(sizes);
  o.kind = eval::CandidateKind::triton;
  return o;
}

bool triton_here() {
  std::string why;
  if (eval::cuda_devices() > 0 && eval::find_triton_python(why)) return true;
  MESSAGE("skipped: ", eval::cuda_devices() > 0 ? why : "no GPU");
  return false;
}

struct Expectation {
  const char* fixture;
  const char* task;
  eval::Status status;
  eval::ReasonCode reason;
  bool fault;  // the worker's context is gone: the next candidate must evaluate normally
};

const Expectation kExpectations[] = {
    {"torch_fallback", "relu", eval::Status::rejected, eval::ReasonCode::torch_compute, false},
    {"decoy_kernel", "relu", eval::Status::rejected, eval::ReasonCode::unlaunched_kernel, false},
    {"side_stream", "relu", eval::Status::rejected, eval::ReasonCode::side_stream, false},
    {"host_thread", "relu", eval::Status::rejected, eval::ReasonCode::forbidden_import, false},
    {"spawns_process", "relu", eval::Status::rejected, eval::ReasonCode::forbidden_import, false},
    {"timer_monkeypatch", "relu", eval::Status::rejected, eval::ReasonCode::monkeypatch, false},
    {"replay_by_pointer", "relu", eval::Status::rejected, eval::ReasonCode::cross_call_state, false},
    {"replay_on_function", "relu", eval::Status::rejected, eval::ReasonCode::monkeypatch, false},
    {"lazy_subclass", "relu", eval::Status::rejected, eval::ReasonCode::tensor_subclass, false},
    {"precision_tf32", "matmul", eval::Status::rejected, eval::ReasonCode::precision_downgrade, false},
    {"precision_half", "relu", eval::Status::rejected, eval::ReasonCode::precision_downgrade, false},
    {"exception_fallback", "relu", eval::Status::rejected, eval::ReasonCode::exception_fallback, false},
    {"harness_reach", "relu", eval::Status::rejected, eval::ReasonCode::harness_reach, false},
    {"dynamic_code", "relu", eval::Status::rejected, eval::ReasonCode::dynamic_code, false},
    {"syntax_error", "relu", eval::Status::rejected, eval::ReasonCode::syntax_error, false},
    {"missing_entry_point", "relu", eval::Status::rejected, eval::ReasonCode::missing_entry_point, false},
    {"skips_half", "relu", eval::Status::incorrect, eval::ReasonCode::output_unwritten, false},
    {"lazy_never_launches", "relu", eval::Status::incorrect, eval::ReasonCode::output_unwritten, false},
    {"input_mutated", "relu", eval::Status::incorrect, eval::ReasonCode::input_mutated, false},
    {"constant_output", "relu", eval::Status::incorrect, eval::ReasonCode::mismatch, false},
    {"torch_by_indexing", "relu", eval::Status::rejected, eval::ReasonCode::foreign_kernels, false},
    {"illegal_address", "relu", eval::Status::runtime_error, eval::ReasonCode::cuda_error, true},
    {"raises", "relu", eval::Status::runtime_error, eval::ReasonCode::nonzero_return, false},
    {"compile_error", "relu", eval::Status::compile_error, eval::ReasonCode::compiler_error, false},
};

}  // namespace

TEST_CASE("triton gpu: the naive Triton candidates are correct at the tasks' CUDA sizes") {
  if (!triton_here()) return;
  test::TestEvaluator t("triton-naive");
  for (const char* name : {"relu", "softmax", "matmul"}) {
    auto task = tasks::find_task(name, test::tasks_dir());
    auto verdict = t.evaluator.evaluate(task, triton_candidate(name), triton_options("cuda"));
    INFO(name, " -> ", test::detail_of(verdict), " | ", verdict.compile.log_excerpt);
    CHECK(verdict.status == eval::Status::correct);
    REQUIRE(verdict.candidate_time.has_value());
    CHECK(verdict.candidate_time->median_us > 0.0);
    REQUIRE(verdict.kernel_coverage.has_value());
    CHECK(*verdict.kernel_coverage > 0.999);
    MESSAGE(std::string(name), ": median ", verdict.candidate_time->median_us, " us, cv ", verdict.candidate_time->cv,
            ", speedup ", verdict.speedup.value_or(0.0), ", compile ", verdict.compile.seconds, " s");
    // A second evaluation finds the build in the cache.
    auto again = t.evaluator.evaluate(task, triton_candidate(name), triton_options("cuda"));
    CHECK(again.status == eval::Status::correct);
    CHECK(again.compile.cached);
  }
}

TEST_CASE("triton gpu: every Triton fixture gets its exact verdict, and the GPU recovers after each fault") {
  if (!triton_here()) return;
  test::TestEvaluator t("triton-fixtures");
  auto relu = tasks::find_task("relu", test::tasks_dir());
  for (const auto& e : kExpectations) {
    auto task = tasks::find_task(e.task, test::tasks_dir());
    auto verdict = t.evaluator.evaluate(task, triton_fixture(e.fixture), triton_options("cpu"));
    INFO("fixture ", std::string(e.fixture), " -> ", test::detail_of(verdict), " | ", verdict.compile.log_excerpt);
    CHECK(verdict.status == e.status);
    CHECK(verdict.has_reason(e.reason));
    if (!e.fault) continue;
    auto after = t.evaluator.evaluate(relu, triton_candidate("relu"), triton_options("cpu"));
    INFO("correct candidate after ", std::string(e.fixture), " -> ", test::detail_of(after));
    CHECK(after.status == eval::Status::correct);
  }
}

TEST_CASE("triton gpu: queued launches hold a Triton worker's calls, with the same verdicts") {
  if (!triton_here()) return;
  test::TestEvaluator t("triton-queued");
  auto relu = tasks::find_task("relu", test::tasks_dir());
  auto queued = triton_options("cuda");
  queued.launches = eval::Launches::queued;
  auto eager = t.evaluator.evaluate(relu, triton_candidate("relu"), triton_options("cuda"));
  auto held = t.evaluator.evaluate(relu, triton_candidate("relu"), queued);
  INFO(test::detail_of(eager), " / ", test::detail_of(held));
  REQUIRE(eager.status == eval::Status::correct);
  REQUIRE(held.status == eval::Status::correct);
  CHECK(held.launches == eval::Launches::queued);
  CHECK(eval::to_json(held, -1).find("\"launches\":\"queued\"") != std::string::npos);
  // One kernel over 64 MiB: held, the time loses the Python launching only.
  CHECK(held.candidate_time->median_us > 0.8 * eager.candidate_time->median_us);
  CHECK(held.candidate_time->median_us < 1.1 * eager.candidate_time->median_us);
  // Tens of milliseconds of host work before a 4 ms kernel: held, the call is timed at no less than that work (its
  // launching bounds it from below). Eagerly it pays both, one after the other. The host's speed moves between
  // evaluations (up to 1.8x in stretches, docs/benchmarks.md), hence the margin.
  auto slow_eager = t.evaluator.evaluate(relu, triton_fixture("slow_launch"), triton_options("cuda"));
  auto slow = t.evaluator.evaluate(relu, triton_fixture("slow_launch"), queued);
  INFO(test::detail_of(slow_eager), " / ", test::detail_of(slow));
  REQUIRE(slow_eager.status == eval::Status::correct);
  REQUIRE(slow.status == eval::Status::correct);
  CHECK(slow.launches == eval::Launches::queued);
  CHECK(slow_eager.candidate_time->median_us > eager.candidate_time->median_us + 1000.0);
  const double host_us = slow_eager.candidate_time->median_us - eager.candidate_time->median_us;
  CHECK(host_us > 3.0 * held.candidate_time->median_us);
  CHECK(slow.candidate_time->median_us > 0.5 * host_us);
  CHECK(slow.candidate_time->median_us > 1.5 * held.candidate_time->median_us);
  auto cpu_sizes = triton_options("cpu");
  cpu_sizes.launches = eval::Launches::queued;
  for (const auto& e : kExpectations) {
    const std::string name = e.fixture;
    if (name != "lazy_never_launches" && name != "input_mutated" && name != "illegal_address" && name != "raises")
      continue;
    auto verdict = t.evaluator.evaluate(tasks::find_task(e.task, test::tasks_dir()), triton_fixture(e.fixture), cpu_sizes);
    INFO("fixture ", name, " held -> ", test::detail_of(verdict));
    CHECK(verdict.status == e.status);
    CHECK(verdict.has_reason(e.reason));
  }
  CHECK(t.evaluator.evaluate(relu, triton_candidate("relu"), cpu_sizes).status == eval::Status::correct);
}

TEST_CASE("triton gpu: the naive Triton TriMul is correct on GPU MODE's seven shapes, scored by their geometric mean") {
  if (!triton_here()) return;
  test::TestEvaluator t("triton-trimul");
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  auto verdict = t.evaluator.evaluate(trimul, triton_candidate("trimul"), triton_options("cuda"));
  INFO(test::detail_of(verdict), " | ", verdict.compile.log_excerpt);
  REQUIRE(verdict.status == eval::Status::correct);
  REQUIRE(verdict.shapes.size() == 7);
  for (const auto& s : verdict.shapes)
    MESSAGE(s.name, ": candidate ", s.candidate_us, " us (cv ", s.cv, "), reference ", s.reference_us, " us");
  MESSAGE("geometric mean ", verdict.candidate_time->median_us, " us; reward at scale 1500: ",
          1500.0 / verdict.candidate_time->median_us, "; compile step for the seven shapes ",
          verdict.stages.compile_s, " s");
}

TEST_CASE("triton gpu: a TriMul candidate the gate refuses is refused once, before any of its shapes is evaluated") {
  if (!triton_here()) return;
  test::TestEvaluator t("triton-trimul-refused");
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  const std::string source = triton_candidate("trimul") + "\nimport threading\n";
  auto verdict = t.evaluator.evaluate(trimul, source, triton_options("cuda"));
  INFO(test::detail_of(verdict));
  CHECK(verdict.status == eval::Status::rejected);
  REQUIRE(!verdict.reasons.empty());
  CHECK(verdict.reasons.front().code == eval::ReasonCode::forbidden_import);
  CHECK(verdict.trials.empty());
  CHECK(verdict.shapes.empty());
  CHECK(verdict.stages.correctness_s == 0.0);
  CHECK(verdict.device == eval::Device::cuda(0));
}

// KernelBench-format answers on a real GPU: KernelBench's ReLU (level 1, 19) imported with its reference traced on
// the GPU, an honest answer judged correct, and each hack or mistake given its exact verdict: CUDA sources
// (tests/fixtures/kernelbench/relu_cuda; the worker's pool keeps serving after a lost context) and @triton.jit kernels
// (tests/fixtures/kernelbench/relu_triton, compiled by the evaluator's Triton step before the worker loads them).
// Needs a GPU, a Python whose PyTorch sees it, and KernelBench's problems (CRUCIBLE_KERNELBENCH_DIR, or
// ../shared/kernelbench/KernelBench); skipped, saying which is missing, otherwise.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "crucible/eval/evaluator.h"
#include "crucible/eval/kernelbench_candidate.h"
#include "eager_reference.h"
#include "eval_support.h"
#include "tasks/kernelbench_import.h"
#include "tasks/task_loader.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

fs::path kernelbench_problems() {
  if (const char* env = std::getenv("CRUCIBLE_KERNELBENCH_DIR")) return env;
  return test::source_dir().parent_path() / "shared" / "kernelbench" / "KernelBench";
}

struct ImportedRelu {
  test::ScratchDir dir{"kb-gpu"};
  std::optional<eval::TaskSpec> task;
  std::string skipped;
};

ImportedRelu& imported() {
  static std::unique_ptr<ImportedRelu> t = [] {
    auto p = std::make_unique<ImportedRelu>();
    std::string why;
    const fs::path problem = kernelbench_problems() / "level1" / "19_ReLU.py";
    const auto python = eval::find_kernelbench_python(why, true);
    if (eval::cuda_devices() == 0) p->skipped = "no GPU";
    else if (!python) p->skipped = why;
    else if (!fs::exists(problem)) p->skipped = "no KernelBench problem at " + problem.string();
    if (!p->skipped.empty()) return p;
    tasks::KernelBenchImport request;
    request.problems = {problem};
    request.out = p->dir.path() / "tasks";
    request.python = python->executable;
    request.cuda = true;
    const auto report = tasks::import_kernelbench(request);
    if (report.imported.empty()) {
      p->skipped = "the import refused 19_ReLU: " + tasks::report_json(report);
      return p;
    }
    p->task = tasks::find_task(report.imported.front(), request.out);
    return p;
  }();
  return *t;
}

eval::EvalOptions kernelbench_gpu_options() {
  auto o = test::gpu_options("cuda", 10.0, 600.0);  // the first build also precompiles torch/extension.h
  o.kind = eval::CandidateKind::kernelbench;
  return o;
}

std::string fixture(const std::string& name, const std::string& folder = "relu_cuda") {
  return test::read_file(test::source_dir() / "tests/fixtures/kernelbench" / folder / (name + ".py"));
}

struct Expectation {
  const char* fixture;
  eval::Status status;
  std::optional<eval::ReasonCode> reason;
};

const Expectation kExpectations[] = {
    {"ok", eval::Status::correct, std::nullopt},
    {"stale_empty", eval::Status::incorrect, std::nullopt},
    {"illegal_address", eval::Status::runtime_error, eval::ReasonCode::cuda_error},
    {"ok", eval::Status::correct, std::nullopt},  // the pool serves on after a lost context
    {"mutates_input", eval::Status::incorrect, eval::ReasonCode::input_mutated},
    {"fallback_to_torch", eval::Status::rejected, eval::ReasonCode::no_custom_work},
    {"decoy", eval::Status::rejected, eval::ReasonCode::no_custom_work},
    {"library_only", eval::Status::rejected, eval::ReasonCode::no_custom_work},
    {"side_stream", eval::Status::rejected, eval::ReasonCode::forbidden_import},
    {"wrong_values", eval::Status::incorrect, eval::ReasonCode::mismatch},
    {"compile_error", eval::Status::compile_error, eval::ReasonCode::compiler_error},
};

const Expectation kTritonExpectations[] = {
    {"ok", eval::Status::correct, std::nullopt},
    {"compile_error", eval::Status::compile_error, eval::ReasonCode::compiler_error},  // Triton's, in the compile step
    {"decoy", eval::Status::rejected, eval::ReasonCode::no_custom_work},  // the profiler: PyTorch did the work
    {"wrong_values", eval::Status::incorrect, eval::ReasonCode::mismatch},
};

}  // namespace

TEST_CASE("kernelbench gpu: CUDA answers to KernelBench's ReLU get their exact verdicts") {
  auto& relu = imported();
  if (!relu.skipped.empty()) {
    MESSAGE("skipped: " << relu.skipped);
    return;
  }
  test::TestEvaluator t("kb-gpu-eval");
  for (const auto& e : kExpectations) {
    CAPTURE(e.fixture);
    const auto v = t.evaluator.evaluate(*relu.task, fixture(e.fixture), kernelbench_gpu_options());
    INFO(test::detail_of(v));
    INFO(v.compile.log_excerpt);
    CHECK(v.status == e.status);
    if (e.reason) CHECK(v.has_reason(*e.reason));
    if (e.status == eval::Status::correct) {
      CHECK(v.speedup.value_or(0.0) > 0.0);
      CHECK(v.kernel_coverage.has_value());  // the profiler saw the extension's kernel as the candidate's own
      if (v.kernel_coverage) CHECK(*v.kernel_coverage > 0.5);
    }
  }
}

TEST_CASE("kernelbench gpu: Triton answers to KernelBench's ReLU get their exact verdicts") {
  auto& relu = imported();
  if (!relu.skipped.empty()) {
    MESSAGE("skipped: " << relu.skipped);
    return;
  }
  test::TestEvaluator t("kb-gpu-triton");
  for (const auto& e : kTritonExpectations) {
    CAPTURE(e.fixture);
    const auto v = t.evaluator.evaluate(*relu.task, fixture(e.fixture, "relu_triton"), kernelbench_gpu_options());
    INFO(test::detail_of(v));
    INFO(v.compile.log_excerpt);
    CHECK(v.status == e.status);
    if (e.reason) CHECK(v.has_reason(*e.reason));
    if (e.status == eval::Status::compile_error) CHECK(!v.compile.log_excerpt.empty());  // Triton's message
    if (e.status == eval::Status::correct) {
      CHECK(v.speedup.value_or(0.0) > 0.0);
      CHECK(v.kernel_coverage.has_value());  // CUPTI saw relu_kernel under the name the gate read
      if (v.kernel_coverage) CHECK(*v.kernel_coverage > 0.5);
    }
  }
  // Judged again, the answer's kernels are found in its cache: the compile step does not run twice.
  const auto again = t.evaluator.evaluate(*relu.task, fixture("ok", "relu_triton"), kernelbench_gpu_options());
  INFO(test::detail_of(again));
  CHECK(again.status == eval::Status::correct);
  CHECK(again.compile.cached);
}

TEST_CASE("kernelbench gpu: a traced reference's numbers are host scalars once loaded onto the GPU") {
  if (eval::cuda_devices() == 0) {
    MESSAGE("skipped: no GPU");
    return;
  }
  // softsign.pt (tests/fixtures/torchscript/make_fixtures.py): `1 + |x|` traced, its 1 a 0-dim tensor constant,
  // which loading onto the GPU puts in device memory; the add's only use of it is elementwise.
  const auto path = test::source_dir() / "tests" / "fixtures" / "torchscript" / "softsign.pt";
  const auto check = eval::eager_rewrites_of(path.string(), "cuda:0");
  CHECK(check.first.device_scalars == 1);
  CHECK(check.second.device_scalars == 0);
  CHECK(check.first.tf32_convolutions == 0);
}

// KernelBench answers with @triton.jit kernels, as far as a machine without a GPU can check them: the compile step that
// fills an answer's Triton cache is asked for its plan and the task's shapes, reads the answer's build and writes only
// its cache, and where there is no Triton or no GPU is an environment failure that is not cached. The GPU side (the
// kernels compiled, loaded by the worker, judged) is tests/kernels_eval/test_kernelbench_gpu.cpp. Skipped, saying so,
// without a Python that has PyTorch.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/kernelbench_candidate.h"
#include "eval_support.h"
#include "kernelbench/kernelbench_triton.h"
#include "tasks/task_loader.h"
#include "triton_step.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

// The argument after `flag` in a command line ("" when absent).
std::string argument(const std::vector<std::string>& argv, const std::string& flag) {
  const auto it = std::find(argv.begin(), argv.end(), flag);
  return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : std::string();
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace

TEST_CASE("kernelbench triton: the compile step builds the plan's ModelNew at the task's shapes into the answer's cache") {
  std::string why;
  const auto python = eval::find_kernelbench_python(why);
  if (!python) {
    MESSAGE("skipped: " << why);
    return;
  }
  test::ScratchDir cache("kb-triton-step");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::KernelBenchBuildOptions options;
  options.dtypes = {eval::DType::float32};
  const std::string source =
      test::read_file(test::source_dir() / "tests/fixtures/kernelbench/relu_triton/ok.py");
  const auto built = eval::build_kernelbench_candidate(*python, compiler, source, options);
  INFO(built.compile.log);
  REQUIRE(built.outcome == eval::KernelBenchBuild::Outcome::ok);
  CHECK(built.kernels == std::vector<std::string>{"relu_kernel"});  // the names the worker counts as its own
  CHECK(built.extensions.empty());

  const auto task = tasks::find_task("kb_relu", test::source_dir() / "tests/fixtures/kernelbench/tasks");
  const fs::path plan = eval::write_kernelbench_plan(built, task, "cpu");
  eval::TritonShapeSet shapes;
  shapes.inputs = {{eval::DType::float32, {64, 128}}};
  shapes.outputs = {{eval::DType::float32, {64, 128}}};
  eval::TritonBuildOptions step_options;
  step_options.device_name = "no GPU";
  step_options.time_limit_s = 120.0;
  const eval::TritonStep step = eval::kernelbench_triton_step(*python, built, plan, shapes, step_options);

  // What it runs: the plan the worker will load, at the shapes of the evaluated size set.
  CHECK(step.argv.front() == python->executable);
  CHECK(fs::path(step.argv.at(2)).filename() == "compile_triton.py");
  CHECK(argument(step.argv, "--plan") == plan.string());
  CHECK(nlohmann::json::parse(argument(step.argv, "--shapes")) ==
        nlohmann::json::parse(R"([{"inputs": [[0, [64, 128]]], "outputs": [[0, [64, 128]]]}])"));
  // What it may touch: the answer's build read-only, its Triton cache (where the worker's TRITON_CACHE_DIR points,
  // beside the plan) writable, and nothing else of the compile cache.
  const fs::path answer_dir = built.candidate_path.parent_path();
  CHECK(plan.parent_path() == answer_dir);
  CHECK(step.work_dir == answer_dir / "triton-cache");
  CHECK(step.home == step.work_dir);
  CHECK(step.tmp_dir == step.work_dir);
  CHECK(contains(step.read_only, answer_dir.string()));
  CHECK(!contains(step.read_only, cache.path().string()));

  // Here, without a GPU (and Debian's Python has no Triton), the step runs confined and says the machine failed:
  // compile_environment, never the answer's compile error, and not cached.
  if (python->cuda) return;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto r = eval::compile_kernelbench_triton(*python, built, plan, shapes, step_options);
    INFO(r.log);
    CHECK(r.outcome == eval::TritonBuild::Outcome::environment_error);
    CHECK(!r.cached);
    CHECK(!r.log.empty());
  }
}

// The search policy's CUDA templates on a real GPU: candidates sampled from every template, and the extremes of
// every knob, are correct at the tasks' CUDA sizes, and every choice of every knob is correct at small odd sizes
// where all the tail paths run (rows past the last row group, columns past the last vector, k past the last tile).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdlib>

#include "crucible/eval/evaluator.h"
#include "eval_support.h"
#include "policy/kernel_templates.h"
#include "policy/search_policy.h"
#include "runtime/knob_combinations.h"
#include "tasks/task_loader.h"

using namespace crucible;
using test::all_combinations;
using test::describe;
using test::spanning_combinations;
using test::sweep_all;

namespace {

// Template candidates at KernelBench sizes: generous limits.
eval::EvalOptions gpu_options(const std::string& sizes) { return test::gpu_options(sizes, 10.0, 120.0); }

// Rows: 67 (not a multiple of any rows-per-block); row lengths: 10004 (vectorisable, not a multiple of any
// threads x unroll); elementwise: 67 x 100003 elements (a tail after the last float4); matmul: 67 x 129 x 1001.
eval::Sizes odd_cuda_sizes(const eval::TaskSpec& task) {
  const bool rows = task.reference == "softmax" || task.reference == "rmsnorm";
  eval::Sizes sizes = task.sizes_for("cuda");
  for (auto& [symbol, value] : sizes) {
    if (symbol == "M" || symbol == "R") value = 67;
    else if (symbol == "K") value = 129;
    else value = task.reference == "matmul" ? 1001 : rows ? 10004 : 100003;
  }
  return sizes;
}

}  // namespace

TEST_CASE("gpu: sampled CUDA template candidates and the knobs' extremes are correct at the tasks' CUDA sizes") {
  test::TestEvaluator t("gpu-templates");
  policy::SearchPolicyOptions options;
  options.language = eval::CandidateLanguage::cuda_cpp();
  policy::SearchPolicy policy(2027, options);
  for (const auto& name : policy::covered_tasks(eval::CandidateLanguage::cuda_cpp())) {
    auto task = tasks::find_task(name, test::tasks_dir());
    const auto* tmpl = policy::template_for(task, eval::CandidateLanguage::cuda_cpp());
    REQUIRE(tmpl != nullptr);
    std::vector<std::pair<std::string, std::string>> candidates;  // (what, source)
    auto combos = spanning_combinations(*tmpl);
    for (std::size_t c = 0; c < 2; ++c) candidates.emplace_back(describe(*tmpl, combos[c]), tmpl->render(task, combos[c]));
    for (const auto& sample : policy.sample(task, 3)) candidates.emplace_back(name + ": " + sample.output, sample.source);
    for (const auto& [what, source] : candidates) {
      auto verdict = t.evaluator.evaluate(task, source, gpu_options("cuda"));
      INFO(what, " -> ", test::detail_of(verdict), "\n", source);
      CHECK(verdict.status == eval::Status::correct);
      if (verdict.candidate_time) MESSAGE(what, ": ", verdict.candidate_time->median_us, " us");
    }
  }
}

TEST_CASE("gpu: every choice of every CUDA template's knobs is correct at odd sizes") {
  test::TestEvaluator t("gpu-templates-odd");
  auto options = gpu_options("odd");
  options.timing_trials = 1;
  struct Case {
    eval::TaskSpec task;
    std::string what, source;
  };
  std::vector<Case> cases;
  for (const auto& name : policy::covered_tasks(eval::CandidateLanguage::cuda_cpp())) {
    auto task = tasks::find_task(name, test::tasks_dir());
    task.sizes["odd"] = odd_cuda_sizes(task);
    const auto* tmpl = policy::template_for(task, eval::CandidateLanguage::cuda_cpp());
    REQUIRE(tmpl != nullptr);
    for (const auto& values : sweep_all() ? all_combinations(*tmpl) : spanning_combinations(*tmpl))
      cases.push_back({task, describe(*tmpl, values), tmpl->render(task, values)});
  }
  if (sweep_all()) {  // hundreds of nvcc runs: build them ahead on every core, into the evaluator's cache
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> builders;
    for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
      builders.emplace_back([&] {
        for (std::size_t c; (c = next++) < cases.size();) t.evaluator.compile(cases[c].source, options);
      });
    for (auto& b : builders) b.join();
  }
  for (const auto& c : cases) {
    auto verdict = t.evaluator.evaluate(c.task, c.source, options);
    INFO(c.what, " -> ", test::detail_of(verdict), "\n", c.source);
    CHECK(verdict.status == eval::Status::correct);
  }
  MESSAGE(cases.size(), " CUDA template candidates evaluated at odd sizes");
}

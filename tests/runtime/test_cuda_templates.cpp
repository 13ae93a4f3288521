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
#include "tasks/task_loader.h"

using namespace crucible;

namespace {

eval::EvalOptions gpu_options(const std::string& sizes) {
  eval::EvalOptions o;
  o.device = "cuda:0";
  o.sizes = sizes;
  o.call_timeout_s = 10.0;
  o.compile.time_limit_s = 120.0;
  return o;
}

// All first choices, all last, then diagonals (the d-th takes choice (d + k) mod size of knob k), without repeats.
std::vector<std::vector<int>> spanning_combinations(const policy::KernelTemplate& t) {
  std::vector<std::vector<int>> combos;
  auto add = [&](std::vector<int> v) {
    if (std::find(combos.begin(), combos.end(), v) == combos.end()) combos.push_back(std::move(v));
  };
  std::vector<int> first, last;
  std::size_t widest = 0;
  for (const auto& k : t.knobs) {
    first.push_back(k.choices.front());
    last.push_back(k.choices.back());
    widest = std::max(widest, k.choices.size());
  }
  add(first);
  add(last);
  for (std::size_t d = 0; d < widest; ++d) {
    std::vector<int> v;
    for (std::size_t k = 0; k < t.knobs.size(); ++k) v.push_back(t.knobs[k].choices[(d + k) % t.knobs[k].choices.size()]);
    add(v);
  }
  return combos;
}

// Every combination of knob values (the full product), for a sweep on request.
std::vector<std::vector<int>> all_combinations(const policy::KernelTemplate& t) {
  std::vector<std::vector<int>> combos{{}};
  for (const auto& knob : t.knobs) {
    std::vector<std::vector<int>> longer;
    for (const auto& prefix : combos)
      for (int value : knob.choices) {
        longer.push_back(prefix);
        longer.back().push_back(value);
      }
    combos = std::move(longer);
  }
  return combos;
}

// CRUCIBLE_ALL_KNOB_COMBINATIONS=1 widens the knob sweeps below from spanning_combinations to all of them.
bool sweep_all() {
  const char* v = std::getenv("CRUCIBLE_ALL_KNOB_COMBINATIONS");
  return v && std::string(v) == "1";
}

std::string describe(const policy::KernelTemplate& t, const std::vector<int>& values) {
  std::string s = t.name + ":";
  for (std::size_t k = 0; k < values.size(); ++k) s += " " + t.knobs[k].name + "=" + std::to_string(values[k]);
  return s;
}

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
  options.backend = "cuda";
  policy::SearchPolicy policy(2027, options);
  for (const auto& name : policy::covered_tasks("cuda")) {
    auto task = tasks::find_task(name, test::tasks_dir());
    const auto* tmpl = policy::template_for(task, "cuda");
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
  for (const auto& name : policy::covered_tasks("cuda")) {
    auto task = tasks::find_task(name, test::tasks_dir());
    task.sizes["odd"] = odd_cuda_sizes(task);
    const auto* tmpl = policy::template_for(task, "cuda");
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

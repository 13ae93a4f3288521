// Every shipped task has a naive CPU candidate, and each one is judged correct.
#include <doctest/doctest.h>

#include "crucible/eval/evaluator.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;

TEST_CASE("every task's shipped CPU candidate is correct") {
  test::ScratchDir cache("shipped");
  eval::EvaluatorConfig config;
  config.cache_dir = cache.path();
  eval::Evaluator evaluator(config);
  eval::EvalOptions options;
  options.timing_trials = 2;
  int evaluated = 0;
  for (const auto& file : tasks::task_files(test::tasks_dir())) {
    auto task = tasks::load_task_file(file);
    auto candidate = test::source_dir() / "configs" / "candidates" / "cpu" / (task.name + ".cpp");
    INFO("task ", task.name);
    REQUIRE(std::filesystem::exists(candidate));
    auto v = evaluator.evaluate(task, test::read_file(candidate), options);
    std::string why;
    for (const auto& r : v.reasons) why += std::string(eval::reason_code_name(r.code)) + ": " + r.detail + "; ";
    INFO(why);
    CHECK(v.status == eval::Status::correct);
    ++evaluated;
  }
  CHECK(evaluated >= 14);
}

// An evaluator set up for its device before any candidate (as an evaluator node does when it starts): a no-op on the
// CPU, the GPU's context and workers where one is usable, and otherwise the error an evaluation there would meet.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "eval_support.h"
#include "tasks/task_loader.h"

using namespace crucible;

TEST_CASE("an evaluator prepared for the CPU, then evaluating there, evaluates as before") {
  test::TestEvaluator t("prepare-cpu");
  CHECK_NOTHROW(t.evaluator.prepare(eval::Device::cpu()));
  auto relu = tasks::find_task("relu", test::tasks_dir());
  auto source = test::read_file(test::source_dir() / "configs" / "candidates" / "cpu" / "relu.cpp");
  CHECK(t.evaluator.evaluate(relu, source).status == eval::Status::correct);
}

TEST_CASE("an evaluator prepared for a GPU sets it up, or says why it cannot, naming the device") {
  test::TestEvaluator t("prepare-gpu");
  bool usable = true;
  try {
    t.evaluator.prepare(eval::Device::cuda(0));
  } catch (const std::invalid_argument& e) {
    usable = false;
    CHECK(std::string(e.what()).find("device cuda:0: ") == 0);  // e.g. "...: this LibTorch has no CUDA"
  }
  if (usable) CHECK_NOTHROW(t.evaluator.prepare(eval::Device::cuda(0)));  // once set up, kept
  // A name that is no device is refused where it is read, before any evaluator sees it.
  CHECK_THROWS_AS(eval::parse_device("tpu:0"), std::invalid_argument);
}

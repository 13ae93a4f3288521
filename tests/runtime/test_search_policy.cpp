// The embedded search policy: reproducible sampling, a policy-gradient update that moves probability towards
// what scored well, snapshots, and rendered candidates that the real evaluator judges correct.
#include <doctest/doctest.h>

#include <stdexcept>

#include "crucible/eval/evaluator.h"
#include "policy/search_policy.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;

TEST_CASE("the search policy samples reproducibly from uniform knob distributions at first") {
  auto relu = tasks::find_task("relu", test::tasks_dir());
  policy::SearchPolicy a(7), b(7);
  auto sa = a.sample(relu, 6), sb = b.sample(relu, 6);
  REQUIRE(sa.size() == 6);
  for (std::size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].tokens == sb[i].tokens);
    CHECK(sa[i].source == sb[i].source);
    CHECK(sa[i].policy_version == 0);
  }
  for (double p : a.probabilities("relu", 0)) CHECK(p == doctest::Approx(0.25));
  auto softmax = tasks::find_task("softmax", test::tasks_dir());
  CHECK_THROWS_AS(a.sample(softmax, 1), std::invalid_argument);  // no template for it yet
}

TEST_CASE("updates move probability towards the choices with positive advantage") {
  auto relu = tasks::find_task("relu", test::tasks_dir());
  policy::SearchPolicy p(3, {0.5, 1.0});
  for (int step = 0; step < 30; ++step) {
    auto samples = p.sample(relu, 8);
    std::vector<double> advantages;
    for (const auto& s : samples) advantages.push_back(s.tokens[0] == 3 ? 1.0 : -0.3);  // reward block 4096
    p.update(samples, advantages);
  }
  CHECK(p.version() == 30);
  auto probs = p.probabilities("relu", 0);
  CHECK(probs[3] > 0.8);
  CHECK_THROWS_AS(p.update(p.sample(relu, 2), {1.0}), std::invalid_argument);

  policy::SearchPolicy restored(99);
  restored.restore(p.snapshot());
  CHECK(restored.version() == p.version());
  CHECK(restored.probabilities("relu", 0) == probs);
  CHECK_THROWS_AS(restored.restore("{\"version\": 1}"), std::invalid_argument);
}

TEST_CASE("candidates rendered from the templates are correct under the real evaluator") {
  test::ScratchDir cache("policy");
  eval::EvaluatorConfig config;
  config.cache_dir = cache.path();
  eval::Evaluator evaluator(config);
  policy::SearchPolicy p(11);
  for (const char* name : {"relu", "gelu", "matmul"}) {
    auto task = tasks::find_task(name, test::tasks_dir());
    for (const auto& sample : p.sample(task, 2)) {
      auto verdict = evaluator.evaluate(task, sample.source);
      INFO(name, ": ", std::string(eval::status_name(verdict.status)), "\n", sample.source);
      CHECK(verdict.status == eval::Status::correct);
    }
  }
}

// The embedded search policy: reproducible sampling, a policy-gradient update that moves probability towards
// what scored well, snapshots, and rendered candidates that the real evaluator judges correct.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "crucible/eval/compiler.h"
#include "crucible/eval/cuda_split.h"
#include "crucible/eval/static_gate.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/evaluator.h"
#include "policy/kernel_templates.h"
#include "policy/search_policy.h"
#include "eval_support.h"
#include "runtime/knob_combinations.h"
#include "tasks/task_loader.h"

using namespace crucible;
using test::all_combinations;
using test::describe;
using test::spanning_combinations;
using test::sweep_all;

namespace {

// Small sizes that are multiples of nothing, so every tail path runs (rows past the last row block, columns past
// the last vector of lanes, a k past the last tile).
eval::Sizes odd_cpu_sizes(const eval::TaskSpec& task) {
  eval::Sizes sizes = task.sizes_for("cpu");
  for (auto& [symbol, value] : sizes) value = symbol == "K" ? 61 : (symbol == "M" || symbol == "R") ? 37 : 1001;
  return sizes;
}

}  // namespace

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
  auto conv2d = tasks::find_task("conv2d", test::tasks_dir());
  CHECK_THROWS_AS(a.sample(conv2d, 1), std::invalid_argument);  // no template for it yet
}

TEST_CASE("each backend covers its families, and the policy samples the backend it was given") {
  CHECK(policy::covered_tasks(eval::CandidateLanguage::cpp()) ==
        std::vector<std::string>{"gelu", "layernorm", "log_softmax", "matmul", "mse_loss", "relu", "rmsnorm",
                                 "softmax", "sum_dim"});
  CHECK(policy::covered_tasks(eval::CandidateLanguage::cuda_cpp()) ==
        std::vector<std::string>{"gelu", "matmul", "relu", "rmsnorm", "softmax"});
  const eval::CandidateLanguage kernelbench{eval::Backend::cpu, eval::CandidateKind::kernelbench};
  CHECK(policy::covered_tasks(kernelbench).empty());  // KernelBench has no templates
  for (const auto backend : {eval::CandidateLanguage::cpp(), eval::CandidateLanguage::cuda_cpp()})
    for (const auto& name : policy::covered_tasks(backend)) {
      auto task = tasks::find_task(name, test::tasks_dir());
      const auto* t = policy::template_for(task, backend);
      REQUIRE(t != nullptr);
      CHECK(t->name == name);
      for (const auto& knob : t->knobs) CHECK(knob.choices.size() >= 2);  // a knob with one choice is no knob
    }
  auto conv2d = tasks::find_task("conv2d", test::tasks_dir());
  CHECK(policy::template_for(conv2d, eval::CandidateLanguage::cpp()) == nullptr);
  CHECK(policy::template_for(conv2d, eval::CandidateLanguage::cuda_cpp()) == nullptr);
  auto layernorm = tasks::find_task("layernorm", test::tasks_dir());
  CHECK(policy::template_for(layernorm, eval::CandidateLanguage::cuda_cpp()) == nullptr);
  CHECK(policy::template_for(layernorm, kernelbench) == nullptr);

  policy::SearchPolicyOptions cuda_options;
  cuda_options.language = eval::CandidateLanguage::cuda_cpp();
  policy::SearchPolicy cuda(5, cuda_options);
  auto softmax = tasks::find_task("softmax", test::tasks_dir());
  auto samples = cuda.sample(softmax, 3);
  REQUIRE(samples.size() == 3);
  for (const auto& sample : samples) {
    CHECK(sample.source.find("__global__") != std::string::npos);
    CHECK(sample.tokens.size() == policy::template_for(softmax, eval::CandidateLanguage::cuda_cpp())->knobs.size());
  }
  CHECK_THROWS_AS(cuda.sample(layernorm, 1), std::invalid_argument);  // CPU only
  policy::SearchPolicy cpu(5);
  CHECK(cpu.sample(softmax, 1)[0].source.find("__global__") == std::string::npos);

  policy::SearchPolicy restored(1);
  restored.restore(cuda.snapshot());
  CHECK(restored.sample(softmax, 1)[0].source.find("__global__") != std::string::npos);
  CHECK_THROWS_AS(cpu.restore(R"({"version": 1, "learning_rate": 0.5, "backend": "tpu", "logits": {}})"),
                  std::invalid_argument);
  policy::SearchPolicyOptions bad;
  bad.language = kernelbench;
  CHECK_THROWS_AS(policy::SearchPolicy(1, bad), std::invalid_argument);
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

TEST_CASE("candidates sampled from the CPU templates are correct under the real evaluator") {
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

TEST_CASE("every choice of every CPU template's knobs renders a correct candidate, tails included") {
  test::ScratchDir cache("policy-knobs");
  eval::EvaluatorConfig config;
  config.cache_dir = cache.path();
  eval::Evaluator evaluator(config);
  eval::EvalOptions shipped, odd;
  shipped.correctness_trials = odd.correctness_trials = 1;
  shipped.timing_trials = odd.timing_trials = 1;
  odd.sizes = "odd";
  int evaluated = 0;
  for (const auto& name : policy::covered_tasks(eval::CandidateLanguage::cpp())) {
    auto task = tasks::find_task(name, test::tasks_dir());
    task.sizes["odd"] = odd_cpu_sizes(task);
    const auto* t = policy::template_for(task, eval::CandidateLanguage::cpp());
    REQUIRE(t != nullptr);
    const auto combos = sweep_all() ? all_combinations(*t) : spanning_combinations(*t);
    for (std::size_t c = 0; c < combos.size(); ++c) {
      const std::string source = t->render(task, combos[c]);
      // The extremes at the task's own sizes, every combination at the odd ones.
      const bool extreme = combos[c] == spanning_combinations(*t)[0] || combos[c] == spanning_combinations(*t)[1];
      for (const auto* options : extreme ? std::vector<const eval::EvalOptions*>{&shipped, &odd}
                                       : std::vector<const eval::EvalOptions*>{&odd}) {
        auto verdict = evaluator.evaluate(task, source, *options);
        ++evaluated;
        INFO(describe(*t, combos[c]), " at sizes ", options->sizes.empty() ? "cpu" : options->sizes, ": ",
             test::detail_of(verdict), "\n", source);
        CHECK(verdict.status == eval::Status::correct);
      }
    }
  }
  MESSAGE(evaluated, " CPU template candidates evaluated");
}

TEST_CASE("CUDA template candidates build with nvcc at the knobs' extremes and between them") {
  if (!std::filesystem::exists("/usr/local/cuda/bin/nvcc")) {
    MESSAGE("SKIPPED: no CUDA toolkit at /usr/local/cuda (nvcc)");
    return;
  }
  test::ScratchDir cache("policy-cuda-compile");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::CompileOptions options;
  options.backend = eval::Backend::cuda;
  options.cuda_arch = "sm_90";
  eval::GatePolicy gate;
  gate.backend = eval::Backend::cuda;
  int compiled = 0;
  for (const auto& name : policy::covered_tasks(eval::CandidateLanguage::cuda_cpp())) {
    auto task = tasks::find_task(name, test::tasks_dir());
    const auto* t = policy::template_for(task, eval::CandidateLanguage::cuda_cpp());
    REQUIRE(t != nullptr);
    // All first choices, all last, and one diagonal in between.
    auto combos = spanning_combinations(*t);
    if (combos.size() > 3) combos.resize(3);
    for (const auto& values : combos) {
      const std::string source = t->render(task, values);
      auto result = compiler.compile(source, options);
      ++compiled;
      INFO(describe(*t, values), "\n", result.log, "\n", source);
      CHECK(result.ok());
      CHECK(result.log.find("warning") == std::string::npos);
      // In two halves (NVRTC and g++), never the whole-file build, and what they link passes the gate.
      INFO(result.whole_because);
      CHECK(result.path != eval::CompilePath::whole);
      CHECK(eval::check_shared_object(result.so_path, gate).empty());
    }
  }
  MESSAGE(compiled, " CUDA template candidates compiled");
}

TEST_CASE("refinement by local search: one knob moves after a correct attempt, two after a failed one") {
  auto matmul = tasks::find_task("matmul", test::tasks_dir());
  policy::SearchPolicy search(11);
  const auto first = search.sample(matmul, 8);
  for (const auto status : {eval::Status::correct, eval::Status::incorrect}) {
    std::vector<policy::Attempt> attempts;
    for (const auto& s : first) {
      policy::Attempt a{s, {}};
      a.feedback.status = status;
      attempts.push_back(a);
    }
    const auto refined = search.refine(matmul, attempts);
    REQUIRE(refined.size() == first.size());
    for (std::size_t i = 0; i < refined.size(); ++i) {
      REQUIRE(refined[i].tokens.size() == first[i].tokens.size());
      int moved = 0;
      for (std::size_t k = 0; k < first[i].tokens.size(); ++k) moved += refined[i].tokens[k] != first[i].tokens[k];
      INFO(first[i].output, " -> ", refined[i].output);
      CHECK(moved == (status == eval::Status::correct ? 1 : 2));
      CHECK(refined[i].source != first[i].source);
      CHECK(refined[i].logprobs.size() == refined[i].tokens.size());
    }
  }
  // An attempt that is not this template's (tokens of another task) starts afresh instead of failing.
  policy::Attempt foreign{first[0], {}};
  foreign.previous.tokens = {99};
  CHECK(search.refine(matmul, {foreign}).size() == 1);
}

TEST_CASE("search policy: every Triton template, at every knob's every choice, passes the Triton gate") {
  int sources = 0;
  for (const std::string& name : policy::covered_tasks(eval::CandidateLanguage::triton())) {
    auto task = tasks::find_task(name, test::tasks_dir());
    const policy::KernelTemplate* t = policy::template_for(task, eval::CandidateLanguage::triton());
    REQUIRE(t != nullptr);
    for (std::size_t k = 0; k < t->knobs.size(); ++k)
      for (int choice : t->knobs[k].choices) {
        std::vector<int> values;
        for (const auto& knob : t->knobs) values.push_back(knob.choices.front());
        values[k] = choice;
        std::string error;
        const auto refusals = eval::triton_gate("/usr/bin/python3", t->render(task, values), {eval::DType::float32}, error);
        INFO(name, " knob ", t->knobs[k].name, " = ", choice, ": ", error);
        CHECK(error.empty());
        CHECK(refusals.empty());
        ++sources;
      }
  }
  CHECK(sources >= 14);
  CHECK(policy::covered_tasks(eval::CandidateLanguage::triton()) ==
        std::vector<std::string>{"gelu", "log_softmax", "relu", "softmax"});
  // The policy itself samples them.
  policy::SearchPolicyOptions o;
  o.language = eval::CandidateLanguage::triton();
  policy::SearchPolicy search(3, o);
  auto samples = search.sample(tasks::find_task("softmax", test::tasks_dir()), 2);
  REQUIRE(samples.size() == 2);
  CHECK(samples[0].source.find("@triton.jit") != std::string::npos);
}

TEST_CASE("every CUDA template's renders split into a host half and an NVRTC half") {
  for (const auto& name : policy::covered_tasks(eval::CandidateLanguage::cuda_cpp())) {
    const auto task = tasks::find_task(name, test::tasks_dir());
    const auto* t = policy::template_for(task, eval::CandidateLanguage::cuda_cpp());
    REQUIRE(t != nullptr);
    for (const auto& combo : spanning_combinations(*t)) {
      const auto split = eval::split_cuda_source(t->render(task, combo));
      INFO(describe(*t, combo), "\nhost: ", split.host_refusal, "\ndevice: ", split.device_refusal);
      CHECK(split.host_ok());
      CHECK(split.device_ok());
    }
  }
}

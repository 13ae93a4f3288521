// The language-model policies' prompt as an experiment sets it: `[policy] prompt` and its KernelBench keys checked
// with file, line and key; KernelBench's prompt for a task is kernelbench_prompt() around the task's problem file
// (the in-repo checkout fixture in every build, ../shared/kernelbench and an imported task where present); a task
// with no problem is a config error naming it; the reply's Python block is the candidate.
#include <doctest/doctest.h>

#include <filesystem>

#include "cli_support.h"
#include "config/toml_reader.h"
#include "crucible/eval/subprocess.h"
#include "experiment/experiment.h"
#include "experiment_support.h"
#include "policy/task_prompt.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

const eval::CandidateLanguage kernelbench_language{eval::Backend::cpu, eval::CandidateKind::kernelbench};


const fs::path kFixtures = test::source_dir() / "tests" / "fixtures" / "kernelbench";
const fs::path kCheckout = kFixtures / "checkout";

fs::path shared_kernelbench() {
  if (const char* env = std::getenv("CRUCIBLE_KERNELBENCH_DIR")) return env;
  return test::source_dir().parent_path() / "shared" / "kernelbench";
}

// An experiment over `tasks_dir` whose served model answers KernelBench-format candidates, plus `policy_keys`.
std::string served_kernelbench(const std::string& tasks, const std::string& tasks_dir, const std::string& policy_keys) {
  return "[experiment]\nname = \"kb\"\n[tasks]\nnames = [" + tasks + "]\ndir = \"" + tasks_dir +
         "\"\n[policy]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n" + policy_keys +
         "[eval]\ncandidate = \"kernelbench\"\n";
}

std::string with_checkout(const fs::path& checkout) { return "kernelbench_dir = \"" + checkout.string() + "\"\n"; }

using test::failure;

// What the experiment's policies show for its first task.
std::string experiment_prompt(const experiment::Experiment& e) {
  const auto tasks = experiment::resolve_tasks(e);
  experiment::check_prompts(e, tasks);
  return policy::TaskPrompter(e.policy.prompt, {e.eval.backend, e.eval.kind}, "").prompt(tasks.front());
}

policy::KernelBenchPromptOptions options_for(const fs::path& checkout, const std::string& option = "one_shot") {
  policy::KernelBenchPromptOptions o;
  o.kernelbench_dir = checkout;
  o.option = option;
  return o;
}

}  // namespace

TEST_CASE("[policy] prompt: KernelBench's for candidate = kernelbench, Crucible's otherwise, checked with file, line, key") {
  const std::string tasks_dir = (kFixtures / "tasks").string();
  auto e = experiment::parse_experiment(served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(kCheckout)), "kb.toml");
  CHECK(e.policy.prompt.kind == policy::PromptKind::kernelbench);
  CHECK(e.policy.prompt.kernelbench.kernelbench_dir == kCheckout);
  CHECK(e.policy.prompt.kernelbench.backend == "cuda");
  CHECK(e.policy.prompt.kernelbench.option == "one_shot");
  e = experiment::parse_experiment(served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(kCheckout) +
                                                      "kernelbench_backend = \"triton\"\nkernelbench_option = "
                                                      "\"zero_shot\"\n"), "kb.toml");
  CHECK(e.policy.prompt.kernelbench.backend == "triton");
  CHECK(e.policy.prompt.kernelbench.option == "zero_shot");
  // Relative to the experiment file, as tasks.dir is; the run's copy of the text names it absolutely.
  e = experiment::parse_experiment(served_kernelbench("\"kb_relu\"", tasks_dir, "kernelbench_dir = \"checkout\"\n"),
                                   "kb.toml", kFixtures);
  CHECK(e.policy.prompt.kernelbench.kernelbench_dir == kCheckout);
  CHECK(e.text.find(kCheckout.string()) != std::string::npos);

  const std::string crucible_tasks = "[experiment]\nname = \"c\"\n[tasks]\nnames = [\"relu\"]\n[policy]\nkind = "
                                     "\"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
  CHECK(experiment::parse_experiment(crucible_tasks, "c.toml").policy.prompt.kind == policy::PromptKind::crucible);
  struct Bad {
    std::string text;
    std::string key;
    int64_t line;
    std::string says;
  };
  const std::vector<Bad> rows{
      {served_kernelbench("\"kb_relu\"", tasks_dir, ""), "policy.kernelbench_dir", 6, "KernelBench checkout"},
      {served_kernelbench("\"kb_relu\"", tasks_dir, "prompt = \"crucible\"\n"), "policy.prompt", 10, "kernelbench"},
      {served_kernelbench("\"kb_relu\"", tasks_dir, "prompt = \"kb\"\n"), "policy.prompt", 10, "unknown prompt 'kb'"},
      {served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(kCheckout) + "kernelbench_option = \"ten_shot\"\n"),
       "policy.kernelbench_option", 11, "ten_shot"},
      {served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(kCheckout) + "kernelbench_backend = \"\"\n"),
       "policy.kernelbench_backend", 11, "backend"},
      {crucible_tasks + "prompt = \"kernelbench\"\n", "policy.prompt", 9, "candidate = \"kernelbench\""},
      {crucible_tasks + with_checkout(kCheckout), "policy.kernelbench_dir", 9, "only with prompt"},
      {"[experiment]\nname = \"r\"\n[tasks]\nnames = [\"relu\"]\n[policy]\nkind = \"replay\"\nreplay_dir = \"x\"\n"
       "prompt = \"crucible\"\n", "policy.prompt", 8, "language-model policies"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    const auto err = failure(row.text);
    CHECK(err.key() == row.key);
    CHECK(err.line() == row.line);
    CHECK(err.file() == "bad.toml");
    CHECK(std::string(err.what()).find(row.says) != std::string::npos);
  }
}

TEST_CASE("KernelBench's prompt in an experiment is kernelbench_prompt() around the task's problem file") {
  const std::string tasks_dir = (kFixtures / "tasks").string();
  const std::string problem = test::read_file(kCheckout / "KernelBench" / "level1" / "19_ReLU.py");
  for (const std::string option : {"one_shot", "zero_shot"}) {
    CAPTURE(option);
    const auto e = experiment::parse_experiment(
        served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(kCheckout) + "kernelbench_option = \"" + option + "\"\n"),
        "kb.toml");
    const std::string prompt = experiment_prompt(e);
    CHECK(prompt == policy::kernelbench_prompt(problem, options_for(kCheckout, option)));
    CHECK(prompt.find(problem) != std::string::npos);  // the problem file, whole
    CHECK(prompt.find("Replace the operators of the module below with CUDA kernels") == 0);
    CHECK((prompt.find("add_ext.add(a, b)") != std::string::npos) == (option == "one_shot"));
  }
  // KernelBench's own prompts.toml and problem file, where the checkout is here.
  const fs::path shared = shared_kernelbench();
  if (!fs::exists(shared / "prompts" / "prompts.toml")) {
    MESSAGE("skipped the real checkout: none at " << shared.string() << " (set CRUCIBLE_KERNELBENCH_DIR)");
    return;
  }
  const auto e = experiment::parse_experiment(served_kernelbench("\"kb_relu\"", tasks_dir, with_checkout(shared)), "kb.toml");
  CHECK(experiment_prompt(e) ==
        policy::kernelbench_prompt(test::read_file(shared / "KernelBench/level1/19_ReLU.py"), options_for(shared)));
}

TEST_CASE("KernelBench's prompt for an imported task is kernelbench_prompt() around the problem file it came from") {
  const fs::path shared = shared_kernelbench();
  const fs::path problem = shared / "KernelBench" / "level1" / "19_ReLU.py";
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  if (!fs::exists(problem) || !eval::run_process({"/usr/bin/python3", "-c", "import torch"}, limits).ok()) {
    MESSAGE("skipped: needs ../shared/kernelbench (or CRUCIBLE_KERNELBENCH_DIR) and /usr/bin/python3 with torch");
    return;
  }
  test::ScratchDir scratch("kb-prompt-import");
  const fs::path tasks = scratch.path() / "tasks";
  auto r = test::crucible_cli({"tasks", "import", "--out", tasks.string(), "--json", "--kernelbench", problem.string()},
                              (scratch.path() / "cache").string(), 900);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The checkout the prompt is read from need not hold the problem: an imported task carries its source.
  const auto e = experiment::parse_experiment(served_kernelbench("\"kb_l1_19\"", tasks.string(), with_checkout(kCheckout)),
                                              "kb.toml");
  CHECK(experiment_prompt(e) == policy::kernelbench_prompt(test::read_file(problem), options_for(kCheckout)));
}

TEST_CASE("a task without a KernelBench problem, or whose problem is not in the checkout, is a config error naming it") {
  test::ScratchDir scratch("kb-prompt-missing");
  const std::string relu = test::read_file(kFixtures / "tasks" / "kb_relu.toml");
  const std::string problem_line = "problem = \"level1/19_ReLU.py\"";
  auto variant = [&](const std::string& name, const std::string& problem) {
    std::string text = relu;
    text.replace(text.find("name = \"kb_relu\""), 16, "name = \"" + name + "\"");
    text.replace(text.find(problem_line), problem_line.size(), problem);
    test::write_file(scratch.path() / (name + ".toml"), text);
  };
  variant("no_problem", "");
  variant("elsewhere", "problem = \"level1/20_Missing.py\"");
  variant("escapes", "problem = \"../../prompts/model_ex_add.py\"");
  struct Row {
    std::string task;
    std::string says;
  };
  for (const Row& row : {Row{"no_problem", "names no KernelBench problem"}, Row{"elsewhere", "20_Missing.py"},
                         Row{"escapes", "is not a path such as"}}) {
    CAPTURE(row.task);
    const auto e = experiment::parse_experiment(
        served_kernelbench("\"" + row.task + "\"", scratch.path().string(), with_checkout(kCheckout)), "kb.toml");
    try {
      experiment::check_prompts(e, experiment::resolve_tasks(e));
      FAIL("accepted");
    } catch (const config::ConfigError& err) {
      CHECK(err.key() == "tasks.names");
      CHECK(std::string(err.what()).find("'" + row.task + "'") != std::string::npos);
      CHECK(std::string(err.what()).find(row.says) != std::string::npos);
    }
  }
  // A checkout without prompts.toml names the key and the folder.
  const auto e = experiment::parse_experiment(
      served_kernelbench("\"kb_relu\"", (kFixtures / "tasks").string(), with_checkout(scratch.path())), "kb.toml");
  try {
    experiment::check_prompts(e, experiment::resolve_tasks(e));
    FAIL("accepted");
  } catch (const config::ConfigError& err) {
    CHECK(err.key() == "policy.kernelbench_dir");
    CHECK(std::string(err.what()).find(scratch.path().string()) != std::string::npos);
  }
}

TEST_CASE("KernelBench's prompter: the reply's last Python block is the candidate, a refinement shows the feedback") {
  policy::PromptSettings settings;
  settings.kind = policy::PromptKind::kernelbench;
  settings.kernelbench = options_for(kCheckout);
  const policy::TaskPrompter prompter(settings, kernelbench_language, "");
  CHECK(prompter.code("Plan.\n```python\nfirst\n```\nBetter:\n```python\nclass ModelNew: pass\n```\n") ==
        std::optional<std::string>("class ModelNew: pass\n"));
  CHECK_FALSE(prompter.code("```cpp\nint f();\n```\n"));                  // C++ is not a ModelNew file
  CHECK_FALSE(prompter.code("```python\nclass ModelNew:\n    pass\n"));  // cut off: no candidate
  const auto task = tasks::load_task_file(kFixtures / "tasks" / "kb_relu.toml");
  policy::Attempt attempt;
  attempt.previous.source = "class ModelNew: pass\n";
  attempt.feedback.status = eval::Status::incorrect;
  const std::string turn = prompter.refinement(task, attempt);
  CHECK(turn.rfind(prompter.prompt(task), 0) == 0);
  CHECK(turn.find("```python\nclass ModelNew: pass\n") != std::string::npos);
  CHECK(turn.find("incorrect") != std::string::npos);
  // A prompt that asks for another kind than the evaluator judges is refused.
  CHECK_THROWS_AS(policy::TaskPrompter(settings, eval::CandidateLanguage::cpp(), ""), std::invalid_argument);
  CHECK_THROWS_AS(policy::TaskPrompter(policy::PromptSettings{}, kernelbench_language, ""), std::invalid_argument);
}

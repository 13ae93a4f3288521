// KernelBench's prompt built from a KernelBench checkout (../shared/kernelbench, or $CRUCIBLE_KERNELBENCH_DIR), checked
// byte for byte against KernelBench's own prompt constructor run on the same checkout, for each backend and option.
// Skipped, saying so, where the checkout is absent.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "crucible/eval/subprocess.h"
#include "policy/kernel_prompt.h"
#include "policy/kernelbench_prompt.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

fs::path shared_kernelbench() {
  if (const char* env = std::getenv("CRUCIBLE_KERNELBENCH_DIR")) return env;
  return test::source_dir().parent_path() / "shared" / "kernelbench";
}

// KernelBench's render_prompt_by_option, run with only what it needs from its package: a TOML reader (the standard
// library's, under the name it imports) and file helpers that resolve its paths inside this checkout.
std::string kernelbench_own_prompt(const fs::path& checkout, const fs::path& problem, const std::string& backend,
                                   const std::string& option) {
  const std::string script =
      "import importlib.util, json, os, sys, tomllib, types\n"
      "root, problem, backend, option = sys.argv[1:5]\n"
      "sys.modules['tomli'] = tomllib\n"
      "utils = types.ModuleType('kernelbench.utils')\n"
      "utils.read_file = lambda p: open(p).read()\n"
      "utils.REPO_TOP_PATH = root\n"
      "utils.get_package_resource_path = lambda rel: os.path.join(root, rel)\n"
      "utils.resolve_path = lambda rel: os.path.join(root, 'prompts', rel.split('src/kernelbench/prompts/')[-1])\n"
      "sys.modules['kernelbench'] = types.ModuleType('kernelbench')\n"
      "sys.modules['kernelbench.utils'] = utils\n"
      "spec = importlib.util.spec_from_file_location('pc', os.path.join(root, 'src/kernelbench/prompt_constructor_toml.py'))\n"
      "pc = importlib.util.module_from_spec(spec); spec.loader.exec_module(pc)\n"
      "text = pc.render_prompt_by_option(prompts_toml=os.path.join(root, 'prompts/prompts.toml'), backend=backend,\n"
      "    option=option, context={'ref_arch_src': open(problem).read()}, precision='fp32')\n"
      "print(json.dumps({'prompt': text}))\n";
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  auto r = eval::run_process({"/usr/bin/python3", "-c", script, checkout.string(), problem.string(), backend, option},
                             limits);
  INFO(r.output);
  REQUIRE(r.ok());
  return nlohmann::json::parse(r.output.substr(r.output.rfind("{\"prompt\"")))["prompt"].get<std::string>();
}

}  // namespace

TEST_CASE("kernelbench prompt: the same text as KernelBench's own constructor, for each backend and option") {
  const fs::path checkout = shared_kernelbench();
  if (!fs::exists(checkout / "prompts" / "prompts.toml")) {
    MESSAGE("skipped: no KernelBench checkout at " << checkout.string() << " (set CRUCIBLE_KERNELBENCH_DIR)");
    return;
  }
  const fs::path problem = checkout / "KernelBench" / "level1" / "19_ReLU.py";
  const std::string source = test::read_file(problem);
  for (const std::string backend : {"cuda", "triton"})
    for (const std::string option : {"one_shot", "zero_shot", "few_shot"}) {
      CAPTURE(backend);
      CAPTURE(option);
      policy::KernelBenchPromptOptions o;
      o.kernelbench_dir = checkout;
      o.backend = backend;
      o.option = option;
      const std::string ours = policy::kernelbench_prompt(source, o);
      CHECK(ours == kernelbench_own_prompt(checkout, problem, backend, option));
      CHECK(ours.find(source.substr(0, 200)) != std::string::npos);
      CHECK(ours.find("{backend_display}") == std::string::npos);
    }
}

TEST_CASE("kernelbench prompt: a missing checkout, backend or option is an error that names it") {
  policy::KernelBenchPromptOptions o;
  o.kernelbench_dir = "/nonexistent/kernelbench";
  CHECK_THROWS_WITH_AS(policy::kernelbench_prompt("x", o), doctest::Contains("/nonexistent/kernelbench"),
                       policy::KernelBenchPromptError);
  const fs::path checkout = shared_kernelbench();
  if (!fs::exists(checkout / "prompts" / "prompts.toml")) return;
  o.kernelbench_dir = checkout;
  o.backend = "fortran";
  CHECK_THROWS_WITH_AS(policy::kernelbench_prompt("x", o), doctest::Contains("'fortran'"), policy::KernelBenchPromptError);
  o.backend = "cuda";
  o.option = "ten_shot";
  CHECK_THROWS_WITH_AS(policy::kernelbench_prompt("x", o), doctest::Contains("'ten_shot'"), policy::KernelBenchPromptError);
}

TEST_CASE("kernelbench prompt: templates are filled as Python's str.format fills named fields") {
  CHECK(policy::format_named("a {x} b {{y}} c", {{"x", "1"}}) == "a 1 b {y} c");
  CHECK(policy::format_named("{x}", {{"x", "{z}"}}) == "{z}");  // a value is not filled again
  CHECK_THROWS_AS(policy::format_named("{missing}", {}), policy::KernelBenchPromptError);
}

TEST_CASE("kernelbench prompt: the reply's Python code block is the candidate") {
  const std::string reply = "Here is the kernel.\n```python\nclass ModelNew:\n    pass\n```\nDone.";
  const eval::CandidateLanguage kernelbench{eval::Backend::cuda, eval::CandidateKind::kernelbench};
  auto code = policy::extract_code(reply, kernelbench);
  REQUIRE(code);
  CHECK(code->find("class ModelNew") != std::string::npos);
  CHECK_FALSE(policy::extract_code("```python\nclass ModelNew:\n", kernelbench));  // cut off: no candidate
}

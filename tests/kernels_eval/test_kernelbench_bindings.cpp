// Crucible's lean bindings for KernelBench extensions (kernels_eval/include/crucible/kernelbench/bindings.h) against
// load_inline's own pybind11 module: one answer built both ways, called the same way, must answer alike; and an answer
// that needs more of PyTorch's C++ API than the lean build has is built with load_inline's unit instead.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/subprocess.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

// Kept with the build tree: the lean kit and the precompiled torch/extension.h take most of this file's time and are
// made once per PyTorch and compile command.
fs::path bindings_cache() {
  return fs::path(CRUCIBLE_CLI_PATH).parent_path().parent_path() / "tests" / "kb-bindings-cache";
}

struct Built {
  eval::KernelBenchBuild build;
  std::string skipped;
};

Built build(const std::string& fixture, eval::ExtensionBuild how) {
  std::string why;
  const auto python = eval::find_kernelbench_python(why);
  if (!python) return {{}, "needs a Python with torch: " + why};
  eval::Compiler compiler(bindings_cache(), eval::default_include_dir());
  eval::KernelBenchBuildOptions options;
  options.extension_build = how;
  options.time_limit_s = 600.0;
  Built b{eval::build_kernelbench_candidate(
      *python, compiler, test::read_file(test::source_dir() / "tests/fixtures/kernelbench" / fixture), options), ""};
  INFO(b.build.compile.log);
  REQUIRE(b.build.outcome == eval::KernelBenchBuild::Outcome::ok);
  REQUIRE(b.build.extensions.size() == 1);
  return b;
}

// The JSON list a script prints on a line of its own (PyTorch may warn on the other lines).
nlohmann::json run_script(const std::string& script, const eval::KernelBenchExtension& ext) {
  eval::ProcessLimits limits;
  limits.wall_seconds = 120;
  const auto r = eval::run_process(
      {"/usr/bin/python3", "-I", (test::source_dir() / "tests/fixtures/kernelbench/bindings" / script).string(),
       ext.so_path.string(), ext.name},
      limits);
  INFO(r.output);
  REQUIRE(r.ok());
  std::stringstream lines(r.output);
  nlohmann::json found;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '[') found = nlohmann::json::parse(line);
  return found;
}

}  // namespace

TEST_CASE("kernelbench bindings: Crucible's lean module answers every call as load_inline's pybind11 module does") {
  const auto lean = build("bindings/signatures.py", eval::ExtensionBuild::lean);
  if (!lean.skipped.empty()) {
    MESSAGE("skipped: " << lean.skipped);
    return;
  }
  CHECK(lean.build.lean);
  const auto pybind = build("bindings/signatures.py", eval::ExtensionBuild::precompiled);
  CHECK_FALSE(pybind.build.lean);
  const auto ours = run_script("calls.py", lean.build.extensions[0]);
  const auto theirs = run_script("calls.py", pybind.build.extensions[0]);
  REQUIRE(ours.size() == theirs.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CAPTURE(i);
    CHECK(ours[i] == theirs[i]);
  }
  // Not both wrong alike: conversions and refusals that a binding must make.
  using nlohmann::json;
  CHECK(ours[0] == json::parse(R"({"tensor": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], "dtype": "torch.float32"})"));
  CHECK(ours[3] == json::parse(R"({"raised": "TypeError"})"));   // scale(t, "a")
  CHECK(ours[9] == json::parse(R"({"raised": "TypeError"})"));   // count(3.0, False)
  CHECK(ours[10] == json::parse(R"({"raised": "TypeError"})"));  // count(2 ** 70, False)
  CHECK(ours[28] == json::parse(R"({"raised": "RuntimeError"})"));  // a failed TORCH_CHECK
  CHECK(ours.back() == json::parse(R"({"tensor": [1.0, 1.0, 1.0], "dtype": "torch.float32"})"));  // in place
}

TEST_CASE("kernelbench bindings: an extension using PyTorch's C++ API beyond torch/types.h builds with load_inline's unit") {
  const auto built = build("bindings/beyond_types.py", eval::ExtensionBuild::lean);
  if (!built.skipped.empty()) {
    MESSAGE("skipped: " << built.skipped);
    return;
  }
  CHECK_FALSE(built.build.lean);
  CHECK(run_script("beyond_types_calls.py", built.build.extensions[0]) ==
        nlohmann::json::parse("[[0.0, 0.0, 0.0, 1.0, 2.0]]"));
}

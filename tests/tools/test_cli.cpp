// The crucible binary as a user runs it: exit codes, JSON output, help.
#include <doctest/doctest.h>

#include "crucible/eval/subprocess.h"
#include "support.h"

using namespace crucible;

namespace {
eval::ProcessResult crucible_cli(const std::vector<std::string>& args, const std::string& cache) {
  std::vector<std::string> argv{"env", "CRUCIBLE_CACHE_DIR=" + cache, CRUCIBLE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  eval::ProcessLimits limits;
  limits.wall_seconds = 120;
  return eval::run_process(argv, limits);
}
}  // namespace

TEST_CASE("crucible eval --json prints one verdict and exits 0 whatever the verdict") {
  test::ScratchDir cache("cli");
  auto good = crucible_cli({"eval", "--task", "relu", "--candidate",
                            (test::source_dir() / "configs/candidates/cpu/relu.cpp").string(), "--json"},
                           cache.path().string());
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("\"status\": \"correct\"") != std::string::npos);
  CHECK(good.output.find("\"speedup\"") != std::string::npos);

  auto log_file = cache.path() / "crucible.log";
  auto bad = crucible_cli({"--log-file", log_file.string(), "eval", "--task", "relu", "--candidate",
                           test::cpu_fixture("segfault").string(), "--json"},
                          cache.path().string());
  CHECK(test::read_file(log_file).find("[eval] relu: runtime_error") != std::string::npos);
  CHECK(bad.exit_code == 0);
  CHECK(bad.output.find("\"status\": \"runtime_error\"") != std::string::npos);
}

TEST_CASE("crucible reports bad input as a classified error with a non-zero exit") {
  test::ScratchDir dir("cli-bad");
  auto task = dir.path() / "broken.toml";
  test::write_file(task, "name = \"broken\"\nlevel = \"x\"\n");
  auto r = crucible_cli({"eval", "--task", task.string(), "--candidate", test::cpu_fixture("segfault").string()},
                        dir.path().string());
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("config error: " + task.string() + ":2: key 'level'") != std::string::npos);

  auto unknown = crucible_cli({"tasks", "show", "no_such_task"}, dir.path().string());
  CHECK(unknown.exit_code == 2);
}

TEST_CASE("crucible tasks list and show, and --help everywhere") {
  test::ScratchDir dir("cli-tasks");
  auto list = crucible_cli({"tasks", "list"}, dir.path().string());
  CHECK(list.exit_code == 0);
  for (const char* name : {"relu", "softmax", "matmul", "layernorm", "conv2d"})
    CHECK(list.output.find(name) != std::string::npos);
  auto show = crucible_cli({"tasks", "show", "layernorm"}, dir.path().string());
  CHECK(show.exit_code == 0);
  CHECK(show.output.find("weight: float32 [D]") != std::string::npos);
  for (auto args : std::vector<std::vector<std::string>>{{"--help"}, {"eval", "--help"}, {"tasks", "--help"}}) {
    auto help = crucible_cli(args, dir.path().string());
    CHECK(help.exit_code == 0);
    CHECK(help.output.find("Usage") != std::string::npos);
  }
}

// The crucible binary as a user runs it: exit codes, JSON output, help.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_support.h"
#include "crucible/eval/evaluator.h"
#include "support.h"

using namespace crucible;
using test::crucible_cli;

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

TEST_CASE("bad input on any command exits 2 with a plain message, never a CLI11 code or an internal error") {
  test::ScratchDir dir("cli-exit");
  const std::string cache = dir.path().string();
  const auto relu = (test::source_dir() / "configs/candidates/cpu/relu.cpp").string();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  test::write_file(dir.path() / "kernel.cu", "__global__ void k() {}\n");
  const std::vector<Case> cases = {
      {{"eval", "--task", "relu", "--candidate", (dir.path() / "missing.cpp").string()}, "cannot read candidate"},
      {{"eval", "--task", "relu", "--candidate", dir.path().string()}, "a directory"},
      {{"eval", "--task", "relu", "--candidate", relu, "--timing-trials", "0"}, "--timing-trials"},
      {{"eval", "--task", "relu", "--candidate", relu, "--correctness-trials", "-2"}, "--correctness-trials"},
      {{"eval", "--task", "relu", "--candidate", relu, "--timeout", "0"}, "--timeout"},
      {{"eval", "--task", "relu", "--candidate", (dir.path() / "kernel.cu").string()}, "--device cuda"},
      {{"no-such-command"}, "no-such-command"},
      {{}, "give a command"},
      {{"tasks", "--tasks-dir", "/nonexistent", "list"}, "does not exist"},
      {{"generate", "--model", "m", "--prompt", "x", "--temperature", "-1"}, "--temperature"},
      {{"run", "--out", "/proc/crucible-cannot-write-here"}, "error"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args.empty() ? std::string() : c.args.front() + (c.args.size() > 1 ? " " + c.args.back() : ""));
    auto r = crucible_cli(c.args, cache);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.says) != std::string::npos);
    CHECK(r.output.find("internal error") == std::string::npos);
  }
  // --out naming a run that exists: bad input too, with the way to continue it. A run of two candidates: the
  // quickstart's 16 steps took over two minutes beside other tests on a 2-core machine.
  const auto tiny = dir.path() / "tiny.toml";
  test::write_file(tiny, "[experiment]\nname = \"tiny\"\nmode = \"best_of_n\"\n[tasks]\nnames = [\"relu\"]\n"
                         "[policy]\nkind = \"search\"\n[best_of_n]\nk = 2\ngroup_size = 2\n"
                         "[eval]\ndevices = [\"cpu\"]\nmode = \"fast\"\n");
  auto first = crucible_cli({"run", tiny.string(), "--out", (dir.path() / "run").string(), "--quiet"}, cache);
  REQUIRE(first.exit_code == 0);
  auto again = crucible_cli({"run", tiny.string(), "--out", (dir.path() / "run").string(), "--quiet"}, cache);
  CHECK(again.exit_code == 2);
  CHECK(again.output.find("--resume") != std::string::npos);
}

TEST_CASE("crucible generate checks its device before loading and warns of an adapter trained on another model") {
  test::ScratchDir dir("cli-generate");
  const std::string cache = dir.path().string();
  const auto fixtures = test::source_dir() / "tests" / "fixtures" / "lm";
  if (eval::cuda_devices() == 0) {
    auto gpu = crucible_cli({"generate", "--model", (fixtures / "qwen2_tiny").string(), "--prompt", "x", "--device", "cuda:0"},
                            cache);
    CHECK(gpu.exit_code == 2);
    CHECK(gpu.output.find("0 usable CUDA GPUs (use --device cpu)") != std::string::npos);
    CHECK(gpu.output.size() < 300);  // one line, not LibTorch's trace
  }
  auto other = crucible_cli({"generate", "--model", (fixtures / "qwen2_tiny_f16").string(), "--adapter",
                             (fixtures / "qwen2_tiny_peft").string(), "--prompt", "x", "--max-new", "2"},
                            cache);
  CHECK(other.exit_code == 0);
  CHECK(other.output.find("warning: the adapter") != std::string::npos);
  auto own = crucible_cli({"generate", "--model", (fixtures / "qwen2_tiny").string(), "--adapter",
                           (fixtures / "qwen2_tiny_peft").string(), "--prompt", "x", "--max-new", "2"},
                          cache);
  CHECK(own.exit_code == 0);
  CHECK(own.output.find("warning") == std::string::npos);
}

TEST_CASE("crucible node says what it waits for before it gives up") {
  test::ScratchDir dir("cli-node-wait");
  test::write_file(dir.path() / "secret", "0123456789abcdef0123456789abcdef\n");
  std::filesystem::permissions(dir.path() / "secret", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto r = crucible_cli({"node", "--join", "127.0.0.1:9", "--devices", "cpu", "--secret-file",
                         (dir.path() / "secret").string(), "--give-up-after", "2"},
                        dir.path().string());
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("no coordinator at 127.0.0.1:9 yet") != std::string::npos);
}

TEST_CASE("crucible node refuses to build ahead on a CPU device, before it joins anything") {
  test::ScratchDir dir("cli-node-ahead");
  test::write_file(dir.path() / "secret", "0123456789abcdef0123456789abcdef\n");
  std::filesystem::permissions(dir.path() / "secret", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto r = crucible_cli({"node", "--join", "127.0.0.1:9", "--devices", "cpu", "--secret-file",
                         (dir.path() / "secret").string(), "--compile-ahead", "1", "--give-up-after", "1"},
                        dir.path().string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--compile-ahead on cpu") != std::string::npos);
}

TEST_CASE("crucible --version names the version and the commit") {
  test::ScratchDir dir("cli-version");
  auto v = crucible_cli({"--version"}, dir.path().string());
  CHECK(v.exit_code == 0);
  CHECK(v.output.rfind("crucible 0.", 0) == 0);
  CHECK(v.output.find("(commit ") != std::string::npos);
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

  // Queued launches hold GPU calls: asked for on the CPU, refused before anything is built.
  auto queued = crucible_cli({"eval", "--task", "relu", "--candidate", test::source_dir().string() +
                              "/configs/candidates/cpu/relu.cpp", "--launches", "queued"}, dir.path().string());
  CHECK(queued.exit_code == 2);
  CHECK(queued.output.find("--launches queued holds Triton candidates' GPU calls") != std::string::npos);
  auto bogus = crucible_cli({"eval", "--task", "relu", "--candidate", test::source_dir().string() +
                             "/configs/candidates/cpu/relu.cpp", "--launches", "held"}, dir.path().string());
  CHECK(bogus.exit_code != 0);
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

TEST_CASE("crucible logs --seed keeps one seed's lines of a run whose seeds share logs/") {
  test::ScratchDir run("cli-logs-seed");
  test::write_file(run.path() / "logs" / "node.log",
                   "2024-05-01T12:00:00.100 info  [node] seed 1: 2 units, 0 committed before\n"
                   "2024-05-01T12:00:01.000 info  [node] seed 12: 2 units, 0 committed before\n");
  test::write_file(run.path() / "logs" / "coordinator.log",
                   "2024-05-01T12:00:00.500 info  [coordinator] first seed's unit\n"
                   "2024-05-01T12:00:01.500 info  [coordinator] second seed's unit\n");
  auto one = crucible_cli({"logs", run.path().string(), "--seed", "1"}, run.path().string());
  CHECK(one.exit_code == 0);
  CHECK(one.output.find("first seed's unit") != std::string::npos);
  CHECK(one.output.find("second seed's unit") == std::string::npos);
  // With another filter too: the seed's start line is still seen.
  auto filtered = crucible_cli({"logs", run.path().string(), "--seed", "1", "--actor", "coordinator"}, run.path().string());
  CHECK(filtered.output.find("first seed's unit") != std::string::npos);
  CHECK(filtered.output.find("[node]") == std::string::npos);
  auto twelve = crucible_cli({"logs", run.path().string(), "--seed", "12"}, run.path().string());
  CHECK(twelve.output.find("second seed's unit") != std::string::npos);
  CHECK(twelve.output.find("first seed's unit") == std::string::npos);
}

TEST_CASE("crucible logs merges actors' logs in time order and filters by actor and level") {
  test::ScratchDir run("cli-logs");
  test::write_file(run.path() / "logs" / "compiler.log",
                   "2024-05-01T12:00:00.100 debug [compiler] compiling a\n"
                   "2024-05-01T12:00:00.300 warning [compiler] slow compile\n");
  test::write_file(run.path() / "logs" / "evaluator.log",
                   "2024-05-01T12:00:00.200 info  [evaluator] started\n"
                   "2024-05-01T12:00:00.400 error [evaluator] worker crashed\n");
  auto cache = run.path().string();

  auto all = crucible_cli({"logs", run.path().string(), "--level", "trace"}, cache);
  CHECK(all.exit_code == 0);
  auto started = all.output.find("[evaluator] started");
  auto slow = all.output.find("[compiler] slow compile");
  CHECK(all.output.find("[compiler] compiling a") < started);
  CHECK(started < slow);
  CHECK(slow < all.output.find("[evaluator] worker crashed"));

  auto evaluator = crucible_cli({"logs", "--actor", "evaluator", (run.path() / "logs").string()}, cache);
  CHECK(evaluator.exit_code == 0);
  CHECK(evaluator.output.find("[evaluator] started") != std::string::npos);
  CHECK(evaluator.output.find("[compiler]") == std::string::npos);

  auto warnings = crucible_cli({"logs", run.path().string(), "--level", "warn"}, cache);
  CHECK(warnings.exit_code == 0);
  CHECK(warnings.output.find("[compiler] slow compile") != std::string::npos);
  CHECK(warnings.output.find("[evaluator] worker crashed") != std::string::npos);
  CHECK(warnings.output.find("started") == std::string::npos);
  CHECK(warnings.output.find("compiling a") == std::string::npos);

  auto both = crucible_cli({"logs", run.path().string(), "--actor", "compiler", "--level", "info"}, cache);
  CHECK(both.output.find("slow compile") != std::string::npos);
  CHECK(both.output.find("compiling a") == std::string::npos);
  CHECK(both.output.find("[evaluator]") == std::string::npos);

  // The default level is info: no debug lines.
  auto plain = crucible_cli({"logs", run.path().string()}, cache);
  CHECK(plain.output.find("compiling a") == std::string::npos);
  CHECK(plain.output.find("[evaluator] started") != std::string::npos);
  // An actor or node that does not exist is said, with the ones that do.
  auto unknown = crucible_cli({"logs", run.path().string(), "--actor", "optimiser"}, cache);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("actors: compiler, evaluator") != std::string::npos);
  CHECK(crucible_cli({"logs", run.path().string(), "--node", "gpu-9"}, cache).output.find("nodes: local") !=
        std::string::npos);
  // --follow ends when no run holds the directory (here: none ever did).
  auto followed = crucible_cli({"logs", run.path().string(), "--follow"}, cache);
  CHECK(followed.exit_code == 0);
  CHECK(followed.output.find("worker crashed") != std::string::npos);

  auto missing = crucible_cli({"logs", (run.path() / "no_such_run").string()}, cache);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("no such run or logs directory") != std::string::npos);
}

TEST_CASE("a deeply nested experiment exits 2 naming file and line: run, report and runs do not crash") {
  namespace fs = std::filesystem;
  test::ScratchDir dir("cli-deep");
  const std::string cache = dir.path().string();
  // 50,000 header parts in 100 KB: the TOML parser's recursion overflowed the stack (SIGSEGV, exit 139).
  std::string deep = "[a";
  for (int i = 0; i < 50'000; ++i) deep += ".a";
  deep += "]\n";
  const auto file = dir.path() / "deep.toml";
  test::write_file(file, deep);
  auto run = crucible_cli({"run", file.string(), "--out", (dir.path() / "out").string()}, cache);
  CHECK(run.exit_code == 2);
  CHECK(run.output.find(file.string() + ":1: nested deeper than 32 levels") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "out"));

  // The same file as a run directory's experiment: report refuses the run, runs lists it as unreadable.
  const auto run_dir = dir.path() / "runs" / "deep-1";
  test::write_file(run_dir / "experiment.toml", deep);
  fs::create_directories(run_dir / "seed-1");
  auto report = crucible_cli({"report", run_dir.string(), "--out", "-"}, cache);
  CHECK(report.exit_code == 2);
  CHECK(report.output.find((run_dir / "experiment.toml").string() + ":1: nested deeper") != std::string::npos);
  auto runs = crucible_cli({"runs", (dir.path() / "runs").string()}, cache);
  CHECK(runs.exit_code == 0);
  CHECK(runs.output.find("unreadable: " + (run_dir / "experiment.toml").string() + ":1:") != std::string::npos);
}

TEST_CASE("crucible run names file, line and key of every refused experiment and leaves no directory behind") {
  namespace fs = std::filesystem;
  test::ScratchDir dir("cli-refused");
  const std::string cache = dir.path().string();
  const std::string root = (dir.path() / "runs").string();
  test::write_file(dir.path() / "file", "not a directory\n");
  struct Case {
    std::string keys;  // [experiment] keys from line 2, then [tasks] and these
    std::string where;
  };
  const std::vector<Case> cases = {
      {"name = \"a\\u0000b\"\nrun_root = \"" + root + "\"\n", ":2: key 'experiment.name'"},
      {"name = \"t\"\nrun_root = \"" + (dir.path() / "file").string() + "\"\n", ":3: key 'experiment.run_root'"},
      {"name = \"t\"\nrun_root = \"" + root + "\"\n[policy]\nkind = \"replay\"\nreplay_dir = \"" +
           (dir.path() / "missing").string() + "\"\n",
       ":6: key 'policy.replay_dir'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.keys);
    const auto file = dir.path() / "refused.toml";
    test::write_file(file, "[experiment]\n" + c.keys + "[tasks]\nnames = [\"relu\"]\n");
    auto r = crucible_cli({"run", file.string(), "--quiet"}, cache);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("experiment error: " + file.string() + c.where) != std::string::npos);
    CHECK_FALSE(fs::exists(root));
  }
}

TEST_CASE("the language-model tools given a model that does not load say why and exit 1, without aborting") {
  const test::ScratchDir empty("lm-tool-no-model");  // a directory without config.json
  const auto tools_dir = std::filesystem::path(CRUCIBLE_CLI_PATH).parent_path();
  const std::string model = empty.path().string(), out = (empty.path() / "logits.safetensors").string();
  const std::vector<std::vector<std::string>> runs = {
      {"bench_lm", "--model", model, "--device", "cpu"},
      {"lm_logits_dump", "--model", model, "--device", "cpu", "--prompts", "1,2", "--out", out}};
  for (auto argv : runs) {
    const std::string tool = argv.front();
    CAPTURE(tool);
    argv.front() = (tools_dir / tool).string();
    eval::ProcessLimits limits;
    limits.wall_seconds = 60;
    const auto r = eval::run_process(argv, limits);
    CHECK(r.signal == 0);  // std::terminate would abort
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(tool + ": error: ") != std::string::npos);
  }
}

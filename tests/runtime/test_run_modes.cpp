// `crucible run` end to end on the CPU, as a user runs it: every mode, learning, overlap of the stages, candidates
// that crash or hang mid-run, kill -9 and --resume, and malformed experiments refused before any work.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "cli_support.h"
#include "process_support.h"
#include "run/jsonl.h"
#include "support.h"

using namespace crucible;
using nlohmann::json;
using run::read_jsonl;
namespace fs = std::filesystem;

namespace {

// Small and quick: one correctness trial, three timed calls.
const std::string kFastEval = "[eval]\ndevices = [\"cpu\"]\nmode = \"fast\"\ncorrectness_trials = 1\ntiming_trials = 3\n";

// A run takes up to minutes.
eval::ProcessResult crucible_cli(const std::vector<std::string>& args, const fs::path& cache) {
  return test::crucible_cli(args, cache.string(), 600);
}

struct Run {
  fs::path dir;
  std::vector<json> steps, candidates;
};

Run run_experiment(const test::ScratchDir& scratch, const std::string& toml) {
  const fs::path file = scratch.path() / "experiment.toml";
  test::write_file(file, toml);
  const fs::path dir = scratch.path() / "run";
  auto r = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return {dir, read_jsonl(dir / "seed-1" / "steps.jsonl"), read_jsonl(dir / "seed-1" / "candidates.jsonl")};
}

double t(const json& record, const char* stage, int end) { return record["times"][stage][end].get<double>(); }

// Starts `crucible run FILE --out DIR` in the background and waits until `commits` units are committed (or five
// minutes pass); returns its pid.
pid_t start_run(const test::ScratchDir& scratch, const fs::path& file, const fs::path& dir, std::size_t commits) {
  const std::string cache = "CRUCIBLE_CACHE_DIR=" + (scratch.path() / "cache").string();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/usr/bin/env", "env", cache.c_str(), CRUCIBLE_CLI_PATH, "run", file.c_str(), "--out", dir.c_str(),
          "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  const fs::path journal = dir / "seed-1" / "journal.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while ((fs::exists(journal) ? read_jsonl(journal).size() : 0) < commits && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return pid;
}

void kill_9(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

// Kills a run (-9) once `commits` units are committed; returns how many were.
std::size_t kill_after_commits(const test::ScratchDir& scratch, const fs::path& file, const fs::path& dir,
                               std::size_t commits) {
  kill_9(start_run(scratch, file, dir, commits));
  const fs::path journal = dir / "seed-1" / "journal.jsonl";
  return fs::exists(journal) ? read_jsonl(journal).size() : 0;
}

// GRPO over relu and matmul, 6 steps of 2 groups of 4: long enough to be caught mid-run.
std::string six_steps_of_two_tasks(const std::string& name) {
  return "[experiment]\nname = \"" + name + "\"\n[tasks]\nnames = [\"relu\", \"matmul\"]\n" +
         "[grpo]\nsteps = 6\nbatch_size = 2\ngroup_size = 4\nmax_staleness = 1\n" + kFastEval;
}

// Every candidate of the run recorded exactly once: `per_unit` of each of `units` units, no id twice.
void check_each_candidate_once(const fs::path& dir, std::size_t units, int per_unit) {
  auto candidates = read_jsonl(dir / "seed-1" / "candidates.jsonl");
  CHECK(candidates.size() == units * static_cast<std::size_t>(per_unit));
  std::map<std::string, int> count;
  std::set<uint64_t> ids;
  for (const auto& c : candidates) ++count[c["unit"]], ids.insert(c["candidate_id"].get<uint64_t>());
  CHECK(ids.size() == candidates.size());
  for (const auto& [unit, n] : count) CHECK(n == per_unit);
}

// Kills a run (-9) after two commits, resumes it, and returns its steps once it has committed all `units`.
std::vector<json> kill_then_resume(const test::ScratchDir& scratch, const fs::path& file, const fs::path& dir,
                                   std::size_t units) {
  const std::size_t before = kill_after_commits(scratch, file, dir, 2);
  MESSAGE("killed after " << before << " commits");
  REQUIRE(before >= 2);
  REQUIRE(before < units);
  auto r = crucible_cli({"run", "--resume", dir.string()}, scratch.path() / "cache");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto steps = read_jsonl(dir / "seed-1" / "steps.jsonl");
  REQUIRE(steps.size() == units);
  return steps;
}

// The tiny fixture language model as a `[policy] kind = "libtorch"` table.
std::string tiny_lm_policy(int max_new_tokens) {
  return "[policy]\nkind = \"libtorch\"\nmodel = \"" + (test::source_dir() / "tests/fixtures/lm/qwen2_tiny").string() +
         "\"\nmax_new_tokens = " + std::to_string(max_new_tokens) + "\n[policy.lora]\nrank = 4\n[policy.train]\n" +
         "learning_rate = 1e-3\n";
}

}  // namespace

TEST_CASE("grpo learns, overlaps its stages with max_staleness = 1, and commits every step once") {
  test::ScratchDir scratch("run-grpo");
  auto run = run_experiment(scratch, R"([experiment]
name = "learn"
mode = "grpo"
[tasks]
names = ["matmul"]
[policy]
learning_rate = 3.0
[grpo]
steps = 6
batch_size = 2
group_size = 6
max_staleness = 1
)" + kFastEval);
  REQUIRE(run.steps.size() == 6);
  for (int s = 0; s < 6; ++s) CHECK(run.steps[s]["unit"] == "step=" + std::to_string(s));
  REQUIRE(run.candidates.size() == 6 * 2 * 6);
  std::set<uint64_t> ids;
  for (const auto& c : run.candidates) ids.insert(c["candidate_id"].get<uint64_t>());
  CHECK(ids.size() == run.candidates.size());

  // Learning: the loop order and tiles matter several-fold for matmul; the policy finds the fast ones.
  const double first = run.steps.front()["reward_mean"], last = run.steps.back()["reward_mean"];
  MESSAGE("reward mean: step 0 " << first << ", step 5 " << last);
  CHECK(last > first);

  // Overlap: step s+1 may be sampled before step s has trained, and compiled while step s is still being evaluated.
  // Both are allowed, not forced (a step whose evaluation ends before the previous commit trains before the next
  // sample starts), so they are counted; the bound itself, s+1 sampled only after step s-1 trained, holds always.
  std::map<uint64_t, std::vector<const json*>> by_step;
  for (const auto& c : run.candidates) by_step[c["step"].get<uint64_t>()].push_back(&c);
  int compile_overlaps = 0, sample_overlaps = 0;
  for (uint64_t s = 0; s + 1 < 6; ++s) {
    double train_end = t(*by_step[s].front(), "train", 1), next_generated = 1e300;
    for (const auto* c : by_step[s + 1]) next_generated = std::min(next_generated, t(*c, "generate", 0));
    sample_overlaps += next_generated < train_end;
    if (s > 0) CHECK(next_generated >= t(*by_step[s - 1].front(), "train", 1));
    bool overlap = false;
    for (const auto* a : by_step[s + 1])
      for (const auto* b : by_step[s])
        overlap = overlap || (t(*a, "compile", 0) < t(*b, "evaluate", 1) && t(*b, "evaluate", 0) < t(*a, "compile", 1));
    compile_overlaps += overlap;
  }
  CHECK(compile_overlaps > 0);
  CHECK(sample_overlaps > 0);
  int stale = 0;
  for (const auto& c : run.candidates) {
    CHECK(c["staleness"].get<int>() <= 1);
    stale += c["staleness"].get<int>() == 1;
  }
  CHECK(stale > 0);

  // Per-actor logs, live-readable through `crucible logs`.
  auto logs = crucible_cli({"logs", run.dir.string(), "--actor", "coordinator"}, scratch.path() / "cache");
  CHECK(logs.exit_code == 0);
  CHECK(logs.output.find("run finished") != std::string::npos);
  CHECK(logs.output.find("[evaluator") == std::string::npos);
  CHECK(fs::exists(run.dir / "summary.json"));
}

TEST_CASE("grpo with max_staleness = 0 is strictly on-policy, once per seed") {
  test::ScratchDir scratch("run-sync");
  auto run = run_experiment(scratch, R"([experiment]
name = "sync"
seeds = [1, 2]
[tasks]
names = ["relu"]
[grpo]
steps = 3
batch_size = 1
group_size = 4
max_staleness = 0
)" + kFastEval);
  REQUIRE(run.candidates.size() == 12);
  std::map<uint64_t, double> train_end;
  for (const auto& c : run.candidates) train_end[c["step"].get<uint64_t>()] = t(c, "train", 1);
  for (const auto& c : run.candidates) {
    CHECK(c["staleness"] == 0);
    const uint64_t s = c["step"];
    if (s > 0) CHECK(t(c, "generate", 0) >= train_end[s - 1]);
    CHECK(c["policy_version"] == s);
  }
  // The second seed is a replicate with its own policy, from version 0.
  auto second = read_jsonl(run.dir / "seed-2" / "candidates.jsonl");
  CHECK(second.size() == 12);
  CHECK(second.front()["policy_version"] == 0);
  auto summary = json::parse(test::read_file(run.dir / "summary.json"));
  CHECK(summary["seeds"].size() == 2);
}

TEST_CASE("best_of_n keeps the best verdict per task and accounts its budget") {
  test::ScratchDir scratch("run-bon");
  auto run = run_experiment(scratch, R"([experiment]
name = "bon"
mode = "best_of_n"
[tasks]
names = ["relu", "gelu"]
[best_of_n]
k = 6
group_size = 3
)" + kFastEval);
  REQUIRE(run.steps.size() == 2);
  CHECK(run.candidates.size() == 12);
  auto summary = json::parse(test::read_file(run.dir / "summary.json"));
  const auto& tasks = summary["seeds"]["1"]["tasks"];
  for (const char* task : {"relu", "gelu"}) {
    CAPTURE(task);
    REQUIRE(tasks.contains(task));
    CHECK(tasks[task]["best"]["status"] == "correct");
    double best = 0;
    for (const auto& c : run.candidates)
      if (c["task"] == task) best = std::max(best, c["reward"].get<double>());
    CHECK(tasks[task]["best"]["reward"].get<double>() == doctest::Approx(best));
  }
  CHECK(summary["seeds"]["1"]["budget"]["samples"].get<double>() == 12);
  CHECK(summary["seeds"]["1"]["budget"]["evaluation_seconds"].get<double>() > 0);
  for (const auto& c : run.candidates) CHECK(c["advantage"].is_null());  // nothing trains in best-of-N
}

TEST_CASE("multi-turn grpo: each turn refines the last one's kernels, TRLOO per turn, best across turns reported") {
  test::ScratchDir scratch("run-multi-turn");
  auto run = run_experiment(scratch, R"([experiment]
name = "multi_turn"
[tasks]
names = ["matmul"]
[grpo]
steps = 2
batch_size = 1
group_size = 3
max_staleness = 0
[multi_turn]
turns = 3
returns = "discounted"
gamma = 0.4
[advantage]
kind = "trloo"
)" + kFastEval);
  REQUIRE(run.steps.size() == 2);
  REQUIRE(run.candidates.size() == 2 * 3 * 3);  // steps x trajectories x turns
  std::map<uint64_t, std::map<uint32_t, json>> trajectories;
  for (const auto& c : run.candidates) trajectories[c["trajectory"]][c["turn"]] = c;
  CHECK(trajectories.size() == 6);
  for (const auto& [id, turns] : trajectories) {
    REQUIRE(turns.size() == 3);
    CHECK(turns.at(0)["candidate_id"] == id);  // a trajectory is named by its first turn
    for (uint32_t turn = 1; turn < 3; ++turn) {
      const auto& before = turns.at(turn - 1);
      const auto& now = turns.at(turn);
      CHECK(now["policy_output"] != before["policy_output"]);  // refined: knobs moved
      CHECK(t(now, "generate", 0) >= t(before, "evaluate", 1));  // after the turn it refines was judged
      CHECK(now["step"] == before["step"]);
    }
  }
  // TRLOO: at each turn of a group, the advantages of its trajectories sum to zero (leave-one-out).
  std::map<std::pair<uint64_t, uint32_t>, double> sums;
  for (const auto& c : run.candidates) {
    REQUIRE(c["advantage"].is_number());
    sums[{c["group"].get<uint64_t>(), c["turn"].get<uint32_t>()}] += c["advantage"].get<double>();
  }
  for (const auto& [key, sum] : sums) CHECK(sum == doctest::Approx(0.0).epsilon(1e-9));
  // Per-turn metrics and best-across-turns selection in every step's record.
  for (const auto& step : run.steps) {
    REQUIRE(step["turns"].size() == 3);
    CHECK(step["turns"][2]["turn"] == 2);
    REQUIRE(step.contains("best_across_turns"));
    double best_turn_max = 0;
    for (const auto& turn : step["turns"]) best_turn_max = std::max(best_turn_max, turn["reward_mean"].get<double>());
    CHECK(step["best_across_turns"]["reward_mean"].get<double>() >= best_turn_max - 1e-9);
  }
}

TEST_CASE("best_of_n with PUCT: later groups refine states the archive chose, one group after another") {
  test::ScratchDir scratch("run-puct");
  auto run = run_experiment(scratch, R"([experiment]
name = "puct"
mode = "best_of_n"
[tasks]
names = ["matmul"]
[best_of_n]
k = 9
group_size = 3
[search]
kind = "puct"
c = 1.0
)" + kFastEval);
  REQUIRE(run.candidates.size() == 9);
  std::map<uint64_t, json> by_id;
  std::map<uint64_t, std::vector<json>> by_group;
  for (const auto& c : run.candidates) by_id[c["candidate_id"]] = c, by_group[c["group"]].push_back(c);
  REQUIRE(by_group.size() == 3);
  auto group = by_group.begin();
  for (const auto& c : group->second) CHECK(c["parent"].is_null());  // the first group samples afresh
  double first_group_scored = 0;
  for (const auto& c : group->second) first_group_scored = std::max(first_group_scored, c["times"]["scored"].get<double>());
  for (++group; group != by_group.end(); ++group)
    for (const auto& c : group->second) {
      CAPTURE(c.dump());
      REQUIRE(c["parent"].is_number());
      const auto& parent = by_id.at(c["parent"].get<uint64_t>());
      CHECK(parent["group"].get<uint64_t>() < c["group"].get<uint64_t>());  // an earlier, already scored group
      CHECK(c["policy_output"] != parent["policy_output"]);                // a refinement, not a copy
      CHECK(t(c, "generate", 0) >= first_group_scored);
    }
}

TEST_CASE("ttt with PUCT killed mid-run resumes with its archive: the steps after the restart refine earlier states") {
  test::ScratchDir scratch("run-puct-resume");
  const fs::path file = scratch.path() / "experiment.toml", dir = scratch.path() / "run";
  test::write_file(file, R"([experiment]
name = "puct_resume"
mode = "ttt"
[tasks]
names = ["matmul"]
[ttt]
steps = 6
rollouts = 3
[search]
kind = "puct"
)" + kFastEval);
  const auto steps = kill_then_resume(scratch, file, dir, 6);
  CHECK(steps.size() == 6);
  check_each_candidate_once(dir, 6, 3);
  std::map<uint64_t, json> by_id;
  const auto candidates = read_jsonl(dir / "seed-1" / "candidates.jsonl");
  for (const auto& c : candidates) by_id[c["candidate_id"]] = c;
  // Every step after the first refines a state of an earlier step, across the restart too: without the archive
  // the first step after it would sample afresh (no parent).
  for (const auto& c : candidates) {
    CAPTURE(c.dump());
    if (c["step"] == 0) {
      CHECK(c["parent"].is_null());
      continue;
    }
    REQUIRE(c["parent"].is_number());
    CHECK(by_id.at(c["parent"].get<uint64_t>())["step"].get<int>() < c["step"].get<int>());
  }
}

TEST_CASE("ttt adapts per task and selects the best kernel and the best step") {
  test::ScratchDir scratch("run-ttt");
  // A checkpoint (a search-policy snapshot) that has learnt relu's largest block and unroll.
  const fs::path checkpoint = scratch.path() / "checkpoint.json";
  test::write_file(checkpoint, R"({"version": 40, "learning_rate": 0.5, "temperature": 1.0, "backend": "cpu",
    "logits": {"relu": [[0, 0, 0, 30], [0, 0, 0, 30]]}})");
  auto run = run_experiment(scratch, R"([experiment]
name = "ttt"
mode = "ttt"
[tasks]
names = ["relu", "matmul"]
[policy]
checkpoint = ")" + checkpoint.string() + R"("
[ttt]
steps = 3
rollouts = 4
concurrent_tasks = 2
[advantage]
kind = "entropic_adaptive_beta"
)" + kFastEval);
  // Adaptation starts from the checkpoint: its version, and relu's knobs as it left them.
  for (const auto& c : run.candidates) {
    CHECK(c["policy_version"].get<int>() >= 40);
    if (c["task"] == "relu" && c["step"] == 0) CHECK(c["policy_output"] == "block=4096 unroll=8");
  }
  REQUIRE(run.steps.size() == 6);
  auto summary = json::parse(test::read_file(run.dir / "summary.json"));
  for (const char* task : {"relu", "matmul"}) {
    CAPTURE(task);
    const auto& s = summary["seeds"]["1"]["tasks"][task];
    CHECK(s["curve"].size() == 3);
    CHECK(s["best_kernel"]["step"].get<int>() >= 0);
    double best = 0;
    for (const auto& c : run.candidates)
      if (c["task"] == task) best = std::max(best, c["reward"].get<double>());
    CHECK(s["best_kernel"]["reward"].get<double>() == doctest::Approx(best));
    CHECK(s["best_step"]["step"].get<int>() < 3);
  }
  // The two tasks adapted at the same time: matmul was evaluated before relu's adaptation had ended.
  double first_matmul = 1e300, last_relu = 0;
  for (const auto& c : run.candidates) {
    if (c["task"] == "matmul") first_matmul = std::min(first_matmul, t(c, "evaluate", 0));
    else last_relu = std::max(last_relu, t(c, "evaluate", 1));
  }
  CHECK(first_matmul < last_relu);
}

TEST_CASE("candidates that crash or hang mid-run end as verdicts and the run goes on") {
  test::ScratchDir scratch("run-crash");
  const fs::path replay = scratch.path() / "replay" / "relu";
  fs::create_directories(replay);
  fs::copy_file(test::source_dir() / "configs/candidates/cpu/relu.cpp", replay / "a_naive.cpp");
  fs::copy_file(test::cpu_fixture("segfault"), replay / "b_segfault.cpp");
  fs::copy_file(test::cpu_fixture("infinite_loop"), replay / "c_infinite_loop.cpp");
  auto run = run_experiment(scratch, R"([experiment]
name = "crash"
[tasks]
names = ["relu"]
[policy]
kind = "replay"
replay_dir = ")" + (scratch.path() / "replay").string() + R"("
[grpo]
steps = 2
batch_size = 1
group_size = 3
)" + kFastEval + "call_timeout_s = 2.0\n");
  REQUIRE(run.candidates.size() == 6);
  std::map<std::string, std::set<std::string>> statuses;
  for (const auto& c : run.candidates) statuses[c["policy_output"]].insert(c["status"]);
  CHECK(statuses["a_naive.cpp"] == std::set<std::string>{"correct"});
  CHECK(statuses["b_segfault.cpp"] == std::set<std::string>{"runtime_error"});
  CHECK(statuses["c_infinite_loop.cpp"] == std::set<std::string>{"timeout"});
  CHECK(run.steps.size() == 2);
}

namespace {

bool python_has_torch() {
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  return eval::run_process({"/usr/bin/python3", "-c", "import torch"}, limits).ok();
}

// A replay run over the KernelBench-style fixture task kb_relu with `[eval] candidate = "kernelbench"`: each answer
// once. Returns, per answer file, its record's status and reason codes.
using Verdicts = std::map<std::string, std::pair<std::string, std::set<std::string>>>;

Verdicts kernelbench_replay(
    const test::ScratchDir& scratch, const std::string& name, const std::vector<std::string>& answers,
    const std::string& eval_keys) {
  const fs::path fixtures = test::source_dir() / "tests/fixtures/kernelbench";
  const fs::path replay = scratch.path() / (name + "-answers");
  for (const auto& answer : answers) {
    fs::create_directories(replay / "kb_relu");
    fs::copy_file(fixtures / "relu" / answer, replay / "kb_relu" / answer);
  }
  const fs::path file = scratch.path() / (name + ".toml");
  test::write_file(file, R"([experiment]
name = ")" + name + R"("
mode = "best_of_n"
[tasks]
names = ["kb_relu"]
dir = ")" + (fixtures / "tasks").string() + R"("
[policy]
kind = "replay"
replay_dir = ")" + replay.string() + R"("
[best_of_n]
k = )" + std::to_string(answers.size()) + "\ngroup_size = " + std::to_string(answers.size()) + "\n" + kFastEval +
                             "candidate = \"kernelbench\"\ncall_timeout_s = 60.0\nevaluation_budget_s = 600.0\n" + eval_keys);
  const fs::path dir = scratch.path() / name;
  auto r = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  Verdicts out;
  for (const auto& c : read_jsonl(dir / "seed-1" / "candidates.jsonl")) {
    std::set<std::string> codes;
    for (const auto& reason : c["reasons"]) codes.insert(reason["code"].get<std::string>());
    out[c["policy_output"]] = {c["status"], codes};
  }
  return out;
}

}  // namespace

TEST_CASE("a replay run judges KernelBench-format answers on the CPU, and torch_ops = forbid refuses PyTorch compute") {
  if (!python_has_torch()) {
    MESSAGE("skipped: KernelBench-format candidates run in /usr/bin/python3 with torch, absent here");
    return;
  }
  test::ScratchDir scratch("run-kernelbench");  // one compile cache: torch/extension.h is precompiled once
  // Status per answer, and a reason code each refusal must carry (a correct verdict may carry notes, such as noisy
  // timing on a loaded machine).
  using Expected = std::map<std::string, std::pair<std::string, std::string>>;
  auto check = [](const Verdicts& got, const Expected& expected) {
    REQUIRE(got.size() == expected.size());
    for (const auto& [answer, want] : expected) {
      CAPTURE(answer);
      REQUIRE(got.count(answer));
      CHECK(got.at(answer).first == want.first);
      if (!want.second.empty()) CHECK(got.at(answer).second.count(want.second) == 1);
    }
  };
  check(kernelbench_replay(scratch, "allow", {"ok.py", "fallback_to_torch.py", "try_except.py"}, ""),
        {{"ok.py", {"correct", ""}},
         {"fallback_to_torch.py", {"rejected", "no_custom_work"}},
         {"try_except.py", {"rejected", "exception_fallback"}}});
  // Forbidden, PyTorch's relu in forward is refused before anything runs; the honest answer stays correct.
  check(kernelbench_replay(scratch, "forbid", {"ok.py", "fallback_to_torch.py"}, "torch_ops = \"forbid\"\n"),
        {{"ok.py", {"correct", ""}}, {"fallback_to_torch.py", {"rejected", "torch_compute"}}});
}

TEST_CASE("bytes that are not UTF-8 in a compile log or a policy's output are recorded, never stop the run") {
  test::ScratchDir scratch("run-utf8");
  const fs::path replay = scratch.path() / "replay" / "relu";
  fs::create_directories(replay);
  // g++ copies a #warning's bytes into its log verbatim; the replay policy's output is the file's name.
  const std::string naive = test::read_file(test::source_dir() / "configs/candidates/cpu/relu.cpp");
  test::write_file(replay / "a_warns.cpp", "#warning \"\xFF\xFE bytes\"\n" + naive);
  test::write_file(replay / "b_name_\xFF.cpp", naive);
  auto run = run_experiment(scratch, R"([experiment]
name = "utf8"
mode = "best_of_n"
[tasks]
names = ["relu"]
[policy]
kind = "replay"
replay_dir = ")" + (scratch.path() / "replay").string() + R"("
[best_of_n]
k = 2
group_size = 2
)" + kFastEval);
  REQUIRE(run.candidates.size() == 2);
  const std::string replacement = "\xEF\xBF\xBD";
  std::set<std::string> outputs;
  for (const auto& c : run.candidates) {
    CHECK(c["status"] == "correct");
    outputs.insert(c["policy_output"].get<std::string>());
    if (c["policy_output"] == "a_warns.cpp") {
      const std::string log = c["compile"]["log"].get<std::string>();  // the compiler pool's build
      CHECK(log.find(replacement + replacement + " bytes") != std::string::npos);
    }
  }
  CHECK(outputs == std::set<std::string>{"a_warns.cpp", "b_name_" + replacement + ".cpp"});
  CHECK(run.steps.size() == 1);
}

TEST_CASE("kill -9 mid-run, then --resume: every step exactly once") {
  test::ScratchDir scratch("run-resume");
  const fs::path file = scratch.path() / "experiment.toml";
  test::write_file(file, six_steps_of_two_tasks("resume"));
  const fs::path dir = scratch.path() / "run";
  const auto steps = kill_then_resume(scratch, file, dir, 6);
  for (int s = 0; s < 6; ++s) CHECK(steps[s]["unit"] == "step=" + std::to_string(s));
  check_each_candidate_once(dir, 6, 2 * 4);
  // The policy went on from the last committed snapshot: versions keep counting.
  CHECK(steps.back()["policy_version"] == 6);
}

TEST_CASE("Ctrl-C says how to resume, the resumed run's progress lines carry the seed and an ETA at its own pace") {
  test::ScratchDir scratch("run-interrupt");
  const fs::path file = scratch.path() / "experiment.toml", dir = scratch.path() / "run";
  test::write_file(file, six_steps_of_two_tasks("interrupted"));
  {
    test::Child run({"/usr/bin/env", "CRUCIBLE_CACHE_DIR=" + (scratch.path() / "cache").string(), CRUCIBLE_CLI_PATH,
                     "run", file.string(), "--out", dir.string()},
                    scratch.path() / "first.out");
    REQUIRE(test::eventually([&] { return read_jsonl(dir / "seed-1" / "journal.jsonl", true).size() >= 2; },
                             std::chrono::seconds(300)));
    run.signal(SIGINT);
    const auto code = run.wait_for(std::chrono::seconds(30));
    INFO(run.output());
    CHECK(code == 128 + SIGINT);
    CHECK(run.output().find("continue with: crucible run --resume " + dir.string()) != std::string::npos);
    CHECK(run.output().find("[grpo seed 1] step=0") != std::string::npos);
  }
  auto resumed = crucible_cli({"run", "--resume", dir.string()}, scratch.path() / "cache");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_each_candidate_once(dir, 6, 8);
  // The first line after the resume estimates from this process's pace: not zero, as it would be if the units
  // committed before counted as done in no time.
  const auto first_line = resumed.output.find("[grpo seed 1]");
  REQUIRE(first_line != std::string::npos);
  const auto eta = resumed.output.find("ETA ", first_line);
  REQUIRE(eta != std::string::npos);
  CHECK(resumed.output.compare(eta, 9, "ETA 0m00s") != 0);
  // Each start is in the summary: commit, machine, load.
  const auto summary = json::parse(test::read_file(dir / "summary.json"));
  REQUIRE(summary["starts"].size() == 2);
  CHECK(summary["starts"][0]["resumed"] == false);
  CHECK(summary["starts"][1]["resumed"] == true);
  for (const auto& start : summary["starts"]) {
    CHECK(start["commit"].is_string());
    CHECK(!start["cpu"].get<std::string>().empty());
    CHECK(start["load_average"].size() == 3);
    CHECK(start["gpus"].is_array());
  }
}

TEST_CASE("a disk that fills mid-run stops it with the file named and the way to resume, and the resume completes") {
  test::ScratchDir scratch("run-full-disk");
  const fs::path file = scratch.path() / "experiment.toml", dir = scratch.path() / "run";
  test::write_file(file, six_steps_of_two_tasks("full_disk"));
  // A file-size limit stands in for a full disk: writes past it fail (EFBIG) as they would with ENOSPC.
  const std::string command = "trap '' XFSZ; ulimit -f 60; exec env CRUCIBLE_CACHE_DIR=" +
                              (scratch.path() / "cache").string() + " " + CRUCIBLE_CLI_PATH + " run " + file.string() +
                              " --out " + dir.string() + " --quiet";
  eval::ProcessLimits limits;
  limits.wall_seconds = 300;
  const auto full = eval::run_process({"/bin/bash", "-c", command}, limits);
  INFO(full.output);
  CHECK(full.exit_code == 1);
  CHECK(full.output.find("cannot write " + (dir / "seed-1").string()) != std::string::npos);
  CHECK(full.output.find("continue with: crucible run --resume " + dir.string()) != std::string::npos);
  CHECK(full.output.find("system_error") == std::string::npos);
  CHECK(full.output.find("unhandled") == std::string::npos);
  auto resumed = crucible_cli({"run", "--resume", dir.string(), "--quiet"}, scratch.path() / "cache");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_each_candidate_once(dir, 6, 8);
}

TEST_CASE("a long step prints its progress between commits: candidates evaluated of generated, by status") {
  test::ScratchDir scratch("run-in-step");
  const fs::path file = scratch.path() / "experiment.toml";
  // One step of 160 candidates: longer than the 5 s between progress lines.
  test::write_file(file, "[experiment]\nname = \"long_step\"\n[tasks]\nnames = [\"relu\", \"softmax\", \"gelu\", "
                         "\"matmul\"]\n[grpo]\nsteps = 1\nbatch_size = 4\ngroup_size = 40\n" + kFastEval);
  auto r = crucible_cli({"run", file.string(), "--out", (scratch.path() / "run").string()}, scratch.path() / "cache");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto at = r.output.find("[grpo seed 1] step=0 in progress: ");
  REQUIRE(at != std::string::npos);
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  CHECK(line.find("/160 evaluated | ") != std::string::npos);
  CHECK(line.find("correct ") != std::string::npos);
}

TEST_CASE("a run directory is held by one process: a second resume or run is refused, naming the holder") {
  test::ScratchDir scratch("run-lock");
  const fs::path file = scratch.path() / "experiment.toml";
  test::write_file(file, six_steps_of_two_tasks("lock"));
  const fs::path dir = scratch.path() / "run";
  const pid_t first = start_run(scratch, file, dir, 1);
  const fs::path journal = dir / "seed-1" / "journal.jsonl";
  REQUIRE(fs::exists(journal));

  // While the first process runs: a resume and a new run into the same directory are both refused.
  auto second = crucible_cli({"run", "--resume", dir.string()}, scratch.path() / "cache");
  CHECK(second.exit_code == 2);
  CHECK(second.output.find("pid " + std::to_string(first)) != std::string::npos);
  auto third = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  CHECK(third.exit_code == 2);
  CHECK(third.output.find("in use") != std::string::npos);

  // The kernel drops the lock of a process killed with -9: the resume that follows runs to the end, once.
  kill_9(first);
  auto resumed = crucible_cli({"run", "--resume", dir.string()}, scratch.path() / "cache");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(read_jsonl(journal).size() == 6);
  check_each_candidate_once(dir, 6, 2 * 4);
}

TEST_CASE("a malformed experiment fails before any work, naming file, line and key") {
  test::ScratchDir scratch("run-bad");
  const fs::path file = scratch.path() / "bad.toml";
  test::write_file(file, "[experiment]\nname = \"bad\"\n[tasks]\nnames = [\"relu\"]\n[grpo]\ngroup_size = -3\n");
  const fs::path dir = scratch.path() / "run";
  auto r = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("bad.toml:6") != std::string::npos);
  CHECK(r.output.find("grpo.group_size") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));

  // A size set no task declares (a plausible typo: the GPU's sizes are "cuda").
  test::write_file(file, "[experiment]\nname = \"bad\"\n[tasks]\nnames = [\"relu\"]\n" + kFastEval + "sizes = \"gpu\"\n");
  r = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("bad.toml:10") != std::string::npos);
  CHECK(r.output.find("eval.sizes") != std::string::npos);
  CHECK(r.output.find("declares no 'gpu' sizes") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));

  test::write_file(file, "[experiment]\nname = \"bad\"\n[tasks]\nnames = [\"conv2d\"]\n");  // no template for it
  r = crucible_cli({"run", file.string(), "--out", dir.string()}, scratch.path() / "cache");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("tasks.names") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("grpo with a language-model policy runs through every actor: parse failures are verdicts, updates checkpoint") {
  test::ScratchDir scratch("run-lm-grpo");
  auto run = run_experiment(scratch, R"([experiment]
name = "lm"
mode = "grpo"
[tasks]
names = ["relu", "matmul"]
[grpo]
steps = 2
batch_size = 2
group_size = 2
[reward]
kind = "composite"
)" + tiny_lm_policy(16) + kFastEval);
  REQUIRE(run.steps.size() == 2);
  REQUIRE(run.candidates.size() == 2 * 2 * 2);
  for (const auto& c : run.candidates) {
    CAPTURE(c.dump());
    CHECK(!c["tokens"].empty());
    CHECK(c["logprobs"].size() == c["tokens"].size());
    // The random model writes no code block: judged as the policy's failure, without a compile or an evaluator.
    CHECK(c["status"] == "parse_error");
    CHECK(c["reasons"][0]["code"] == "no_source");
    CHECK(c["source_file"].is_null());
    CHECK(!c.contains("compile"));
    CHECK(c["reward"] == 0.0);
    CHECK(c["advantage"].is_number());
  }
  for (int s = 0; s < 2; ++s) {
    const auto& step = run.steps[s];
    CHECK(step["policy_version"] == s + 1);
    CHECK(step["train"]["sequences"] == 4);
    CHECK(step["train"]["tokens"].get<int>() > 0);
    CHECK(step["train"]["entropy"].get<double>() > 0);
    const fs::path checkpoint = run.dir / "seed-1" / "policy" / ("v" + std::to_string(s + 1));
    CHECK(fs::exists(checkpoint / "adapter" / "adapter_model.safetensors"));
    CHECK(fs::exists(checkpoint / "optimizer.pt"));
  }
  const auto snapshot = json::parse(test::read_file(run.dir / "seed-1" / "policy" / "2.json"));
  CHECK(snapshot["kind"] == "libtorch");
  CHECK(snapshot["adapters"][""] == "v2");
}

TEST_CASE("ttt with a language-model policy adapts one adapter per task") {
  test::ScratchDir scratch("run-lm-ttt");
  auto run = run_experiment(scratch, R"([experiment]
name = "lm-ttt"
mode = "ttt"
[tasks]
names = ["relu", "gelu"]
[ttt]
steps = 2
rollouts = 2
concurrent_tasks = 2
)" + tiny_lm_policy(12) + kFastEval);
  REQUIRE(run.steps.size() == 4);
  std::set<std::string> adapted;
  for (const auto& step : run.steps) {
    CHECK(step["train"]["adapter"] == step["task"]);
    adapted.insert(step["task"].get<std::string>());
  }
  CHECK(adapted == std::set<std::string>{"relu", "gelu"});
  const auto summary = json::parse(test::read_file(run.dir / "summary.json"));
  for (const char* task : {"relu", "gelu"}) {
    CAPTURE(task);
    CHECK(summary["seeds"]["1"]["tasks"][task]["curve"].size() == 2);
    bool found = false;
    for (const auto& v : fs::directory_iterator(run.dir / "seed-1" / "policy"))
      found = found || fs::exists(v.path() / "tasks" / task / "adapter" / "adapter_config.json");
    CHECK(found);
  }
}

TEST_CASE("ttt with loss = sdpo: every sample's teacher reads the evaluator's feedback, and the update reports it") {
  test::ScratchDir scratch("run-lm-sdpo");
  auto run = run_experiment(scratch, R"([experiment]
name = "lm-sdpo"
mode = "ttt"
[tasks]
names = ["relu"]
[ttt]
steps = 2
rollouts = 3
)" + tiny_lm_policy(12) + "loss = \"sdpo\"\nsdpo_feedback = \"execution\"\nsdpo_weight = 0.5\n" + kFastEval);
  REQUIRE(run.steps.size() == 2);
  for (const auto& step : run.steps) {
    CAPTURE(step.dump());
    // The random model's replies are parse errors: their verdicts are still feedback for a teacher.
    CHECK(step["train"]["taught_sequences"] == 3);
    CHECK(step["train"]["distill_kl"].get<double>() > 0);
  }
}

TEST_CASE("a language-model run killed with -9 resumes from its last checkpoint") {
  test::ScratchDir scratch("run-lm-resume");
  const fs::path file = scratch.path() / "experiment.toml";
  test::write_file(file, R"([experiment]
name = "lm-resume"
[tasks]
names = ["relu"]
[grpo]
steps = 8
batch_size = 1
group_size = 2
max_staleness = 0
)" + tiny_lm_policy(16) + kFastEval);
  const fs::path dir = scratch.path() / "run";
  const auto steps = kill_then_resume(scratch, file, dir, 8);
  for (int s = 0; s < 8; ++s) CHECK(steps[s]["policy_version"] == s + 1);
  // Candidates after the resume were sampled by the restored adapter: their version is the last committed one.
  for (const auto& c : read_jsonl(dir / "seed-1" / "candidates.jsonl")) CHECK(c["policy_version"] == c["step"]);
  CHECK(fs::exists(dir / "seed-1" / "policy" / "v8" / "optimizer.pt"));
}

TEST_CASE("sft-data turns a sweep's best correct kernels into prompt/completion pairs for the warm start") {
  test::ScratchDir scratch("run-sft-data");
  auto run = run_experiment(scratch, R"([experiment]
name = "sweep"
mode = "best_of_n"
[tasks]
names = ["relu", "gelu"]
[best_of_n]
k = 8
)" + kFastEval);
  const fs::path pairs = scratch.path() / "pairs.jsonl";
  auto r = crucible_cli({"sft-data", run.dir.string(), "--out", pairs.string(), "--top", "2", "--min-speedup", "0"},
                        scratch.path() / "cache");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = read_jsonl(pairs);
  std::map<std::string, std::vector<double>> speedups;
  for (const auto& l : lines) {
    const std::string task = l["task"];
    speedups[task].push_back(l["speedup"].get<double>());
    CHECK(l["prompt"].get<std::string>().find("Task: " + task) != std::string::npos);
    CHECK(l["prompt"].get<std::string>().find("crucible_forward") != std::string::npos);
    const std::string completion = l["completion"];
    CHECK(completion.rfind("```cpp\n", 0) == 0);
    CHECK(completion.size() > 10);
    CHECK(completion.substr(completion.size() - 3) == "```");
    // The completion's code is a correct candidate of the sweep.
    bool correct = false;
    for (const auto& c : run.candidates)
      if (c["task"] == task && c["status"] == "correct" &&
          completion.find(test::read_file(run.dir / "seed-1" / c["source_file"].get<std::string>())) != std::string::npos)
        correct = true;
    CHECK(correct);
  }
  REQUIRE(speedups.size() == 2);
  for (const auto& [task, s] : speedups) {
    CHECK(s.size() <= 2);
    CHECK(std::is_sorted(s.rbegin(), s.rend()));  // fastest first
  }
  // By default only kernels at least as fast as the reference are exported.
  const fs::path fast = scratch.path() / "fast.jsonl";
  auto default_export = crucible_cli({"sft-data", run.dir.string(), "--out", fast.string()}, scratch.path() / "cache");
  if (default_export.exit_code == 0) {
    for (const auto& l : read_jsonl(fast)) CHECK(l["speedup"].get<double>() >= 1.0);
  } else {
    CHECK(default_export.output.find("at that speedup") != std::string::npos);
  }
  // A speedup no kernel reaches leaves nothing to learn from: said, and not an empty file called success.
  auto none = crucible_cli({"sft-data", run.dir.string(), "--out", pairs.string(), "--min-speedup", "1e9"},
                           scratch.path() / "cache");
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("no correct kernels") != std::string::npos);
}

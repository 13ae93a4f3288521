#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/toml_reader.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/verdict_json.h"
#include "logging/log.h"
#include "tasks/task_loader.h"

namespace crucible::cli {
namespace {

struct EvalArgs {
  std::string task;
  std::string candidate;
  std::string candidates;  // the batch form: a directory of candidate files
  std::string device = "cpu";
  std::string mode = "fast";
  std::string launches = "eager";
  std::string sizes;
  std::string kind;  // empty: by the file (.py: kernelbench when it defines ModelNew, else triton)
  std::string torch_ops = "allow";  // kernelbench: PyTorch operators inside ModelNew
  std::string tasks_dir;
  std::string cache_dir;
  bool json = false;
  std::optional<uint64_t> seed;
  double timeout_s = 10.0;
  double compile_timeout_s = 60.0;
  double budget_s = 0.0;
  std::size_t memory_mb = 1024;
  int timing_trials = -1;
  int correctness_trials = -1;
};

void print_human(const eval::Verdict& v) {
  std::printf("%s: %s\n", v.task.c_str(), std::string(eval::status_name(v.status)).c_str());
  for (const auto& r : v.reasons)
    std::printf("  reason %-18s %s\n", std::string(eval::reason_code_name(r.code)).c_str(), r.detail.c_str());
  std::printf("  compile %.3f s%s\n", v.compile.seconds, v.compile.cached ? " (cached)" : "");
  if (v.status == eval::Status::compile_error && !v.compile.log_excerpt.empty())
    std::printf("%s\n", v.compile.log_excerpt.c_str());
  for (const auto& t : v.trials)
    std::printf("  trial %d %s  max_abs=%.3g max_rel=%.3g mismatched=%lld/%lld\n", t.trial, t.passed ? "ok  " : "FAIL",
                t.max_abs_error, t.max_rel_error, static_cast<long long>(t.mismatched),
                static_cast<long long>(t.elements));
  if (v.candidate_time)
    std::printf("  candidate  median %.1f us  cv %.2f%%  (%d trials)\n", v.candidate_time->median_us,
                100 * v.candidate_time->cv, v.candidate_time->trials);
  if (v.candidate_event_median_us)
    std::printf("  candidate  median %.1f us by its own stream's events (a hint: not what counts)\n",
                *v.candidate_event_median_us);
  if (v.kernel_coverage)
    std::printf("  kernel coverage %.1f%% of GPU time in the candidate's own kernels\n", 100 * *v.kernel_coverage);
  if (v.reference_time)
    std::printf("  reference  median %.1f us  cv %.2f%%\n", v.reference_time->median_us, 100 * v.reference_time->cv);
  if (v.speedup) std::printf("  speedup %.3fx\n", *v.speedup);
  if (v.gflops) std::printf("  %.2f GFLOP/s\n", *v.gflops);
  if (v.gbps) std::printf("  %.1f GB/s (inputs read and outputs written once)\n", *v.gbps);
  std::printf("  stages: load %.1f ms, correctness %.1f ms, timing %.1f ms, overhead %.1f ms, total %.1f ms\n",
              1e3 * v.stages.load_s, 1e3 * v.stages.correctness_s, 1e3 * v.stages.timing_s,
              1e3 * v.stages.overhead_s, 1e3 * v.stages.total_s);
}

// A .py file is KernelBench's format when it defines ModelNew, else a Triton candidate; anything else is native.
eval::CandidateKind kind_of_file(const std::string& extension, const std::string& source) {
  if (extension != ".py") return eval::CandidateKind::native;
  return source.find("class ModelNew") != std::string::npos ? eval::CandidateKind::kernelbench
                                                             : eval::CandidateKind::triton;
}

eval::EvaluatorConfig evaluator_config(const EvalArgs& a) {
  eval::EvaluatorConfig config;
  if (!a.cache_dir.empty()) config.cache_dir = a.cache_dir;
  return config;
}

// The candidate's kind: as --kind says, else by its file.
eval::CandidateKind candidate_kind(const EvalArgs& a, const std::string& extension, const std::string& source) {
  return !a.kind.empty() ? eval::parse_candidate_kind(a.kind) : kind_of_file(extension, source);
}

eval::EvalOptions eval_options(const EvalArgs& a, eval::Device device, eval::CandidateKind kind) {
  eval::RunEvalSettings run;
  run.backend = device.backend;
  run.kind = kind;
  run.mode = eval::parse_eval_depth(a.mode);
  run.launches = eval::parse_launches(a.launches);
  run.sizes = a.sizes;
  run.correctness_trials = a.correctness_trials;
  run.timing_trials = a.timing_trials;
  run.call_timeout_s = a.timeout_s;
  run.evaluation_budget_s = a.budget_s;
  run.forbid_torch_ops = eval::parse_forbid_torch_ops(a.torch_ops);
  eval::EvalOptions options = eval::options_for(run, device);
  options.seed = a.seed;
  options.compile.time_limit_s = a.compile_timeout_s;
  options.limits.memory_bytes = a.memory_mb << 20;
  return options;
}

// The batch form: every candidate file of a directory (.py, .cpp, .cu), in name order, by one evaluator. One line per
// file (or one JSON object per line, with "candidate" added); a file that cannot be judged is reported and skipped.
int run_batch(const EvalArgs& a, const eval::TaskSpec& task) {
  const eval::Device device = eval::parse_device(a.device, /*allow_bare_cuda=*/true);
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(a.candidates, ec))
    if (e.is_regular_file() && (e.path().extension() == ".py" || e.path().extension() == ".cpp" ||
                                e.path().extension() == ".cu"))
      files.push_back(e.path());
  if (ec || files.empty()) {
    std::cerr << "error: no candidate files (.py, .cpp, .cu) in " << a.candidates << "\n";
    return 2;
  }
  std::sort(files.begin(), files.end());
  eval::Evaluator evaluator(evaluator_config(a));
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream source;
    source << in.rdbuf();
    const std::string text = source.str();
    const eval::CandidateKind kind = candidate_kind(a, file.extension().string(), text);
    const eval::Verdict v = evaluator.evaluate(task, text, eval_options(a, device, kind));
    if (a.json) {
      auto j = nlohmann::json::parse(eval::to_json(v));
      j["candidate"] = file.string();
      std::cout << j.dump() << std::endl;
      continue;
    }
    std::printf("%s: %s", file.filename().c_str(), std::string(eval::status_name(v.status)).c_str());
    for (const auto& r : v.reasons)
      std::printf(" [%s] %s", std::string(eval::reason_code_name(r.code)).c_str(), r.detail.substr(0, 160).c_str());
    if (v.speedup) std::printf(" speedup %.3fx", *v.speedup);
    std::printf("\n");
  }
  return 0;
}

int run_eval(const EvalArgs& a) {
  try {
    auto dir = a.tasks_dir.empty() ? tasks::default_tasks_dir() : std::filesystem::path(a.tasks_dir);
    eval::TaskSpec task = tasks::find_task(a.task, dir);
    if (a.candidate.empty() == a.candidates.empty()) {
      std::cerr << "error: give one of --candidate FILE or --candidates DIR\n";
      return 2;
    }
    if (!a.candidates.empty()) return run_batch(a, task);
    std::error_code ec;
    std::ifstream in(a.candidate, std::ios::binary);
    if (!std::filesystem::is_regular_file(a.candidate, ec) || !in) {
      std::cerr << "error: cannot read candidate " << a.candidate
                << (std::filesystem::is_directory(a.candidate, ec) ? " (a directory, not a source file)" : "") << "\n";
      return 2;
    }
    const eval::Device device = eval::parse_device(a.device, /*allow_bare_cuda=*/true);
    // A CUDA source on the CPU device fails in the compiler with "cuda_runtime.h not found"; say so first.
    const auto ext = std::filesystem::path(a.candidate).extension();
    if (ext == ".cu" && !device.is_cuda()) {
      std::cerr << "error: " << a.candidate << " is CUDA source (.cu); evaluate it with --device cuda (or cuda:N) on a "
                << "machine with a GPU, or write the CPU candidate in C++ (.cpp)\n";
      return 2;
    }
    std::ostringstream source;
    source << in.rdbuf();
    const eval::CandidateKind kind = candidate_kind(a, ext.string(), source.str());
    const eval::Launches launches = eval::parse_launches(a.launches);
    if (launches == eval::Launches::queued && (!device.is_cuda() || kind != eval::CandidateKind::triton)) {
      std::cerr << "error: --launches queued holds Triton candidates' GPU calls (a .py candidate, --device cuda); "
                << "CUDA C++ candidates are timed as launched\n";
      return 2;
    }

    eval::Evaluator evaluator(evaluator_config(a));
    const eval::EvalOptions options = eval_options(a, device, kind);
    log::Logger log{"eval"};
    log.debug("evaluating ", a.candidate, " on task ", task.name, " (", task.source_path, ")");
    eval::Verdict verdict = evaluator.evaluate(task, source.str(), options);
    log.info(task.name, ": ", eval::status_name(verdict.status), " in ", verdict.stages.total_s, " s (compile ",
             verdict.compile.seconds, " s", verdict.compile.cached ? ", cached" : "", "), seed ", verdict.seed);
    if (a.json) std::cout << eval::to_json(verdict) << std::endl;
    else print_human(verdict);
    return 0;
  } catch (const config::ConfigError& e) {
    std::cerr << "config error: " << e.what() << "\n";
    log::Logger{"eval"}.debug("config error: ", e.what());
  } catch (const eval::TaskError& e) {
    std::cerr << "task error: " << e.what() << "\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 2;
}

}  // namespace

Run add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "Evaluate one candidate: compile, gate, sandboxed run, correctness, timing");
  cmd->add_option("--task", args->task, "Task name (in the tasks dir) or path to a task .toml")->required();
  // Checked in run_eval, so a missing file is bad input (exit 2) with a plain message, as everywhere else.
  cmd->add_option("--candidate", args->candidate, "Candidate source file");
  cmd->add_option("--candidates", args->candidates,
                  "A directory of candidate files (.py, .cpp, .cu), each judged on the task: one line (or JSON object) "
                  "per file, e.g. a model's KernelBench answers to one problem");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N (GPU N, with a CUDA build)")->capture_default_str();
  cmd->add_option("--sizes", args->sizes, "The task's size set: cpu or cuda (default: the device's own)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--kind", args->kind,
                  "native (C++ or CUDA C++), triton (Python) or kernelbench (KernelBench's ModelNew format); default: "
                  "kernelbench for .py files that define ModelNew, triton for other .py files")
      ->check(CLI::IsMember({"native", "triton", "kernelbench"}));
  cmd->add_option("--torch-ops", args->torch_ops,
                  "kernelbench: allow (PyTorch operators may stay inside ModelNew, as KernelBench allows) or forbid")
      ->check(CLI::IsMember({"allow", "forbid"}))
      ->capture_default_str();
  cmd->add_option("--mode", args->mode, "fast (2 checks, 5 timed) or full (5 checks, 50 timed)")
      ->check(CLI::IsMember({"fast", "full"}))
      ->capture_default_str();
  cmd->add_option("--launches", args->launches,
                  "Triton candidates' GPU calls: eager (timed from the call, launching included) or queued (GPU work "
                  "held until the candidate has returned, timed from its release; docs/cuda.md)")
      ->check(CLI::IsMember({"eager", "queued"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option("--seed", args->seed, "Seed for input windows (default: random, reported in the verdict)");
  // The same ranges as an experiment's [eval] table.
  cmd->add_option("--timeout", args->timeout_s, "Wall-clock limit of one call, seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--budget", args->budget_s,
                  "Wall-clock limit of the whole evaluation after compiling, seconds (0: derived from the task)")
      ->capture_default_str();
  cmd->add_option("--compile-timeout", args->compile_timeout_s, "Compile time limit, seconds")->capture_default_str();
  cmd->add_option("--memory-mb", args->memory_mb, "Memory a candidate may allocate, MiB")->capture_default_str();
  cmd->add_option("--timing-trials", args->timing_trials, "Override the mode's timed trials (at least 1)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--correctness-trials", args->correctness_trials, "Override the mode's correctness trials (at least 1)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--tasks-dir", args->tasks_dir, "Directory of task .toml files");
  cmd->add_option("--cache-dir", args->cache_dir, "Compile cache directory");
  return [cmd, args]() -> int { return cmd->parsed() ? run_eval(*args) : -1; };
}

}  // namespace crucible::cli

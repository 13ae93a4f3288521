// bench_sweep: a best-of-N sweep on one GPU. K distinct relu candidates (tools/bench/relu_variants.h) are compiled
// in parallel while the evaluator takes each as soon as it is built: 5 correctness trials, 50 timed trials each
// (full mode). Prints a row per candidate and the sweep's wall time, and how the evaluation's wall time compares
// with the candidate's own kernel time over its checked and timed calls (own_x: evaluation / own kernel time), with
// the evaluation's stages (load_ms: worker and arena; check_ms: correctness; time_ms: timing).
// Usage: bench_sweep [--device cuda:0] [--sizes cpu|cuda] [--count 64] [--jobs N] [--emit DIR]
//                    [--task relu] [--tasks-dir DIR]   (any task whose inputs and output are one relu: kb_l1_19)
//                    [--trials N] [--verified N]   (correctness trials; timed calls compared in full: what the
//                    evaluator's checks cost, side by side with full mode's 5 and 4)
// --emit writes the variants' sources to DIR (for the KernelBench-style comparison script) and exits.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "bench/bench_usage.h"
#include "bench/relu_variants.h"
#include "crucible/eval/evaluator.h"
#include "tasks/task_loader.h"

namespace fs = std::filesystem;
using namespace crucible;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  bench::exit_on_help(argc, argv, "usage: bench_sweep [--device cuda:0] [--sizes cpu|cuda] [--count 64] [--jobs N] [--emit DIR] [--task relu] [--tasks-dir DIR] [--trials N] [--verified N]");
  std::string device = "cuda:0", sizes = "cpu", emit, task_name = "relu", tasks_dir;
  // Two cores stay free for the evaluator and its worker (compiles also run at lower priority).
  int trials = -1, verified = -1;  // negative: full mode's own
  int count = 64, jobs = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 2);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--count")) count = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--jobs")) jobs = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--emit")) emit = argv[i + 1];
    else if (!std::strcmp(argv[i], "--task")) task_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tasks-dir")) tasks_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--trials")) trials = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--verified")) verified = std::atoi(argv[i + 1]);
  }
  const eval::Device where = bench::usable_device(device);
  if (!emit.empty()) {
    fs::create_directories(emit);
    for (int i = 0; i < count; ++i) std::ofstream(fs::path(emit) / ("variant_" + std::to_string(i) + ".cu")) << bench::relu_variant(i);
    std::printf("wrote %d variants to %s\n", count, emit.c_str());
    return 0;
  }
  auto task = tasks::find_task(task_name, tasks_dir.empty() ? tasks::default_tasks_dir() : fs::path(tasks_dir));
  eval::EvaluatorConfig config;
  config.cache_dir = fs::temp_directory_path() / ("crucible-bench-sweep-" + std::to_string(getpid()));
  auto start = Clock::now();
  eval::Evaluator evaluator(config);
  eval::EvalOptions options;
  options.mode = eval::EvalDepth::full;  // 5 correctness trials, 50 timed
  options.device = where;
  options.sizes = sizes;
  options.correctness_trials = trials;
  options.verified_timed_calls = verified;

  // The GPU's resources are made by the first evaluation; warm them with a candidate outside the sweep so the
  // sweep's wall time is what a running evaluator would see.
  auto warmup = evaluator.evaluate(task, bench::relu_variant(0) + "// warm-up\n", options);
  const double setup_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (warmup.status != eval::Status::correct) {
    std::printf("warm-up candidate: %s\n", std::string(eval::status_name(warmup.status)).c_str());
    for (const auto& r : warmup.reasons)
      std::printf("  %s: %s\n", std::string(eval::reason_code_name(r.code)).c_str(), r.detail.c_str());
    return 1;
  }
  // Compile in parallel into the shared cache; the evaluator then finds each candidate compiled.
  std::vector<int> built(count, 0);
  std::vector<double> compile_s(count, 0.0);
  std::mutex mutex;
  std::condition_variable ready;
  auto sweep_start = Clock::now();
  std::vector<std::thread> compilers;
  for (int t = 0; t < std::min(jobs, count); ++t)
    compilers.emplace_back([&, t] {
      for (int i = t; i < count; i += jobs) {
        auto r = evaluator.compile(bench::relu_variant(i), options);
        std::lock_guard<std::mutex> lock(mutex);
        compile_s[i] = r.seconds;
        built[i] = 1;
        ready.notify_all();
      }
    });
  std::printf("%-4s %-10s %9s %9s %8s %8s %8s %11s %11s %9s %7s\n", "#", "status", "compile_s", "eval_s", "load_ms",
              "check_ms", "time_ms", "median_us", "event_us", "GB/s", "own_x");
  int correct = 0, best = -1;
  double best_us = 1e30;
  std::vector<double> own_x;
  for (int i = 0; i < count; ++i) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      ready.wait(lock, [&] { return built[i] != 0; });
    }
    auto v = evaluator.evaluate(task, bench::relu_variant(i), options);
    const double us = v.candidate_time ? v.candidate_time->median_us : 0.0;
    if (v.status == eval::Status::correct) {
      ++correct;
      if (us < best_us) best_us = us, best = i;
    }
    // The candidate's own work: its correctness calls (the first trial runs twice) and its timed calls.
    const double eval_s = v.stages.total_s - v.stages.compile_s;
    const int calls = static_cast<int>(v.trials.size()) + 1 + (v.candidate_time ? v.candidate_time->trials : 0);
    const double own_s = calls * v.candidate_event_median_us.value_or(us) * 1e-6;
    const double ratio = own_s > 0 ? eval_s / own_s : 0.0;
    if (v.status == eval::Status::correct) own_x.push_back(ratio);
    std::printf("%-4d %-10s %9.2f %9.3f %8.1f %8.1f %8.1f %11.1f %11.1f %9.0f %7.1f\n", i,
                std::string(eval::status_name(v.status)).c_str(), compile_s[i], eval_s, v.stages.load_s * 1e3,
                v.stages.correctness_s * 1e3, v.stages.timing_s * 1e3, us, v.candidate_event_median_us.value_or(0.0),
                v.gbps.value_or(0.0), ratio);
    std::fflush(stdout);
  }
  for (auto& t : compilers) t.join();
  const double sweep_s = std::chrono::duration<double>(Clock::now() - sweep_start).count();
  std::printf("\n%d candidates on %s (%s, %s sizes): %d correct; best #%d at %.1f us\n", count, device.c_str(),
              task.name.c_str(), sizes.c_str(), correct, best, best_us);
  if (!own_x.empty()) {
    std::sort(own_x.begin(), own_x.end());
    std::printf("evaluation wall / the candidate's own kernel time over its checked and timed calls: median %.1fx "
                "(min %.1fx, max %.1fx)\n", own_x[own_x.size() / 2], own_x.front(), own_x.back());
  }
  std::printf("sweep wall %.2f s (compile %d jobs in parallel with evaluation); evaluator setup before it %.2f s\n",
              sweep_s, jobs, setup_s);
  std::error_code ec;
  fs::remove_all(config.cache_dir, ec);
  return 0;
}

// bench_eval: per-stage evaluation cost for every task's shipped candidate on a device.
// Each candidate is evaluated cold (compile cache miss) and then warm (cache hit, warm worker, reference
// time already known), and the table shows both.
// Usage: bench_eval [--mode fast|full] [--repeats N] [--device cpu|cuda:N] [--sizes cpu|cuda] [--task NAME]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_usage.h"
#include "crucible/eval/evaluator.h"
#include "tasks/task_loader.h"

namespace fs = std::filesystem;
using namespace crucible;

namespace {
std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
double ms(double s) { return 1e3 * s; }
}  // namespace

int main(int argc, char** argv) {
  bench::exit_on_help(argc, argv, "usage: bench_eval [--mode fast|full] [--repeats N] [--device cpu|cuda:N] [--sizes cpu|cuda] [--task NAME]");
  eval::EvalOptions options;
  int repeats = 3;
  std::string only_task;  // empty: every task
  std::string device = "cpu";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mode") && i + 1 < argc) options.mode = !std::strcmp(argv[++i], "full") ? eval::EvalDepth::full : eval::EvalDepth::fast;
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!std::strcmp(argv[i], "--sizes") && i + 1 < argc) options.sizes = argv[++i];
    else if (!std::strcmp(argv[i], "--task") && i + 1 < argc) only_task = argv[++i];
  }
  options.device = bench::usable_device(device);
  const bool gpu = options.device.is_cuda();
  fs::path tasks_dir = tasks::default_tasks_dir();
  fs::path candidates = tasks_dir.parent_path() / "candidates" / (gpu ? "cuda" : "cpu");
  fs::path cache = fs::temp_directory_path() / ("crucible-bench-cache-" + std::to_string(::getpid()));
  eval::EvaluatorConfig config;
  config.cache_dir = cache;
  eval::Evaluator evaluator(config);

  std::printf("device=%s sizes=%s mode=%s, warm = median of %d repeats after the cold run; times in ms\n",
              options.device.name().c_str(), options.sizes.empty() ? "(device's own)" : options.sizes.c_str(),
              options.mode == eval::EvalDepth::full ? "full" : "fast", repeats);
  std::printf("%-14s %-8s %8s | %7s %6s %7s %7s %7s %8s | %8s %8s %7s\n", "task", "status", "compile", "load",
              "gate", "correct", "timing", "kernel", "overhead", "cand_us", "ref_us", "speedup");
  std::vector<double> compiles, overheads;
  for (const auto& file : tasks::task_files(tasks_dir)) {
    auto task = tasks::load_task_file(file);
    if (!only_task.empty() && task.name != only_task) continue;
    fs::path source_file = candidates / (task.name + (gpu ? ".cu" : ".cpp"));
    if (!fs::exists(source_file)) continue;
    std::string source = read(source_file);
    auto cold = evaluator.evaluate(task, source, options);
    std::vector<eval::Verdict> warm;
    for (int r = 0; r < repeats; ++r) warm.push_back(evaluator.evaluate(task, source, options));
    std::sort(warm.begin(), warm.end(), [](const auto& a, const auto& b) { return a.stages.overhead_s < b.stages.overhead_s; });
    const auto& w = warm[warm.size() / 2];
    compiles.push_back(cold.stages.compile_s);
    overheads.push_back(w.stages.overhead_s);
    std::printf("%-14s %-8s %8.1f | %7.2f %6.2f %7.1f %7.1f %7.1f %8.2f | %8.1f %8.1f %7.2f\n", task.name.c_str(),
                std::string(eval::status_name(w.status)).c_str(), ms(cold.stages.compile_s), ms(w.stages.load_s),
                ms(w.stages.gate_s), ms(w.stages.correctness_s), ms(w.stages.timing_s), ms(w.stages.kernel_s),
                ms(w.stages.overhead_s), w.candidate_time ? w.candidate_time->median_us : 0.0,
                w.reference_time ? w.reference_time->median_us : 0.0, w.speedup.value_or(0.0));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::printf("\nmedian cold compile %.1f ms (target < 1000 ms); median warm overhead %.2f ms (target < 20 ms)\n",
              ms(median(compiles)), ms(median(overheads)));
  std::error_code ec;
  fs::remove_all(cache, ec);
  return 0;
}

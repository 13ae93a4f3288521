// bench_repeatability: one candidate evaluated N times (full mode: 50 timed trials each) by one evaluator; prints
// each evaluation's median and speedup, the coefficient of variation of those medians and the speedups' max/min
// (on the CPU the speedup is what must hold: candidate and reference are timed in pairs). Also prints the candidate's
// compiled shared object, for an outside timer (tools/gpu_node/do_bench_candidate.py) to time the same kernel. A task
// scored over several shapes also gets a table per shape: the CV of its medians over the evaluations (how far the
// reported time moves), beside the CV of single calls within one evaluation.
// Usage: bench_repeatability [--device cuda:0] [--task relu] [--candidate FILE] [--kind native|triton] [--sizes cuda]
//                            [--times 10] [--verified N]  (timed calls compared in full per evaluation; default: all)
//                            [--fresh]  (a new evaluator per evaluation: the reference is timed again each time)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "bench/bench_usage.h"
#include "crucible/eval/evaluator.h"
#include "tasks/task_loader.h"

namespace fs = std::filesystem;
using namespace crucible;

namespace {

// Per shape: the medians' CV over the evaluations, and the range of the single calls' CV within them.
void print_shapes(const std::vector<std::vector<eval::ShapeTime>>& runs, bool fresh) {
  std::printf("\nper shape over %zu evaluations (CV of medians: how far the reported time moves; CV of calls: within "
              "one evaluation)\n",
              runs.size());
  std::printf("%-28s %14s %14s %16s %14s %14s %16s\n", "shape", "candidate_us", "cv_medians", "cv_calls",
              "reference_us", "cv_medians", "cv_calls");
  for (std::size_t k = 0; k < runs.front().size(); ++k) {
    std::vector<double> cand, ref, cand_cv, ref_cv;
    for (const auto& run : runs) {
      if (k >= run.size() || run[k].name != runs.front()[k].name) continue;
      cand.push_back(run[k].candidate_us);
      ref.push_back(run[k].reference_us);
      cand_cv.push_back(100 * run[k].cv);
      ref_cv.push_back(100 * run[k].reference_cv);
    }
    const auto c = eval::summarize_times(cand), r = eval::summarize_times(ref);
    auto range = [](const std::vector<double>& x) {
      char text[48];
      std::snprintf(text, sizeof text, "%.2f-%.2f%%", *std::min_element(x.begin(), x.end()),
                    *std::max_element(x.begin(), x.end()));
      return std::string(text);
    };
    std::printf("%-28s %14.1f %13.3f%% %16s %14.1f %13.3f%% %16s\n", runs.front()[k].name.c_str(), c.median_us,
                100 * c.cv, range(cand_cv).c_str(), r.median_us, 100 * r.cv, range(ref_cv).c_str());
  }
  if (!fresh) std::printf("(one evaluator: its reference was timed once, so the reference's medians cannot move)\n");
}

}  // namespace

int main(int argc, char** argv) {
  bench::exit_on_help(argc, argv, "usage: bench_repeatability [--device cuda:0] [--task relu] [--candidate FILE] [--kind native|triton] [--sizes cuda] [--times 10] [--verified N] [--launches eager|queued] [--fresh]");
  std::string device = "cuda:0", task_name = "relu", candidate, sizes;
  int times = 10, verified = -1;
  bool fresh = false;
  eval::CandidateKind kind = eval::CandidateKind::native;
  eval::Launches launches = eval::Launches::eager;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--fresh")) {
      fresh = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--kind")) kind = eval::parse_candidate_kind(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--task")) task_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--candidate")) candidate = argv[i + 1];
    else if (!std::strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--times")) times = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--verified")) verified = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--launches")) launches = eval::parse_launches(argv[i + 1]);
    ++i;
  }
  const eval::Device where = bench::usable_device(device);
  const fs::path tasks_dir = tasks::default_tasks_dir();
  const bool triton = kind == eval::CandidateKind::triton;
  if (candidate.empty())
    candidate = (tasks_dir.parent_path() / "candidates" / std::string(eval::candidate_language(where.backend, kind)) /
                 (task_name + "." + std::string(eval::source_extension(where.backend, kind)))).string();
  std::ifstream in(candidate);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  auto task = tasks::find_task(task_name, tasks_dir);

  eval::EvaluatorConfig config;
  config.cache_dir = fs::temp_directory_path() / ("crucible-bench-repeat-" + std::to_string(getpid()));
  auto evaluator = std::make_unique<eval::Evaluator>(config);
  eval::EvalOptions options;
  options.kind = kind;
  options.mode = eval::EvalDepth::full;
  options.device = where;
  options.sizes = sizes;
  options.verified_timed_calls = verified;
  options.launches = launches;

  std::printf("%-4s %-8s %12s %8s %12s %12s %8s %8s %s\n", "run", "status", "median_us", "cv", "event_us",
              "reference_us", "speedup", "spread", "reasons");
  std::vector<double> medians, references, speedups;
  std::vector<std::vector<eval::ShapeTime>> shape_runs;  // per evaluation, multi-shape tasks only
  for (int r = 0; r < times; ++r) {
    if (fresh && r > 0) evaluator = std::make_unique<eval::Evaluator>(config);  // same cache: builds are reused
    auto v = evaluator->evaluate(task, source, options);
    if (!v.candidate_time) {
      std::printf("%-4d %-8s\n", r, std::string(eval::status_name(v.status)).c_str());
      continue;
    }
    medians.push_back(v.candidate_time->median_us);
    if (!v.shapes.empty()) shape_runs.push_back(v.shapes);
    if (v.speedup) speedups.push_back(*v.speedup);
    if (v.reference_time) references.push_back(v.reference_time->median_us);
    std::string reasons;
    for (const auto& reason : v.reasons) reasons += std::string(eval::reason_code_name(reason.code)) + " ";
    std::printf("%-4d %-8s %12.2f %7.2f%% %12.2f %12.2f %8.3f %7.1f%% %s\n", r,
                std::string(eval::status_name(v.status)).c_str(), v.candidate_time->median_us,
                100 * v.candidate_time->cv, v.candidate_event_median_us.value_or(0.0),
                v.reference_time ? v.reference_time->median_us : 0.0, v.speedup.value_or(0.0),
                100 * v.speedup_spread.value_or(0.0), reasons.c_str());
    std::fflush(stdout);
  }
  auto stats = eval::summarize_times(medians);
  std::printf("\n%s on %s: median of medians %.2f us, CV of the %d medians %.3f%% (target <= 0.5%%)\n",
              task_name.c_str(), device.c_str(), stats.median_us, stats.trials, 100 * stats.cv);
  if (fresh && references.size() > 1) {
    auto ref = eval::summarize_times(references);
    std::printf("reference, timed by each new evaluator: median %.2f us, CV of the %d medians %.3f%%\n", ref.median_us,
                ref.trials, 100 * ref.cv);
  }
  if (shape_runs.size() > 1) print_shapes(shape_runs, fresh);
  if (!speedups.empty())
    std::printf("speedups %.3f-%.3f: max/min %.3f (targets on the CPU: <= 1.05 quiet, <= 1.15 beside two busy "
                "processes)\n",
                *std::min_element(speedups.begin(), speedups.end()), *std::max_element(speedups.begin(), speedups.end()),
                *std::max_element(speedups.begin(), speedups.end()) / *std::min_element(speedups.begin(), speedups.end()));
  if (!triton) {
    auto compiled = evaluator->compile(source, options);
    // Copied out of the cache, which goes away with this run.
    const fs::path keep = fs::temp_directory_path() / ("crucible-repeat-" + task_name + ".so");
    fs::copy_file(compiled.so_path, keep, fs::copy_options::overwrite_existing);
    std::printf("shared object: %s\n", keep.c_str());
  }
  std::error_code ec;
  fs::remove_all(config.cache_dir, ec);
  return 0;
}

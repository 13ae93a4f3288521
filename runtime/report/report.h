#pragma once
// What `crucible report` shows for one run or compares across runs, computed from the records alone: per-step
// curves with a band across seeds, status breakdowns, the best kernel per task, budgets, per-node throughput,
// losses, a stage timeline and, for two or more runs, fast_p with bootstrap confidence intervals, per-task
// speedups and results by difficulty. Renderers (render.h) turn it into HTML, Markdown, CSV or JSON.
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "report/run_record.h"
#include "report/statistics.h"

namespace crucible::report {

using Cell = std::variant<std::monostate, double, std::string>;  // empty, a number, a text

struct Table {
  std::string id, title, note;
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

struct Series {
  std::string label;  // the run
  std::vector<int> steps;
  std::vector<Band> points;  // across seeds
};

struct Chart {
  std::string id, title;
  std::vector<Series> series;
};

enum class Stage { generate, compile, evaluate, train };

struct Bar {
  std::size_t lane = 0;
  Stage stage = Stage::generate;
  double start = 0, end = 0;  // seconds since the timeline's start
};

struct Timeline {
  std::string run;
  int seed = 0;
  std::vector<std::string> lanes;
  std::vector<Bar> bars;
  double seconds = 0;
  std::size_t candidates_left_out = 0;  // beyond the first kMaxTimelineCandidates
};

struct ScatterPoint {
  std::string task;
  double x = 0, y = 0;
};

struct Scatter {
  std::string x_label, y_label;
  std::vector<ScatterPoint> points;
};

struct BestKernel {
  std::string run, task;
  int seed = 0;
  CandidateRow candidate;
  std::string source;            // empty when the run kept none (parse_error)
  std::filesystem::path record;  // the seed's candidates.jsonl
};

struct Report {
  std::vector<std::string> runs;  // "name (dir)"
  std::vector<Table> tables;
  std::vector<Chart> charts;
  std::vector<Timeline> timelines;
  std::optional<Scatter> scatter;  // two or more runs: the first two, best speedup per task
  std::vector<BestKernel> best;
  std::vector<std::string> warnings;
};

constexpr std::size_t kMaxTimelineCandidates = 2000;
// The thresholds fast_p is reported at.
inline const std::vector<double> kFastThresholds{0.0, 1.0, 1.2, 1.5, 2.0};

Report build_report(const std::vector<RunRecord>& runs);

}  // namespace crucible::report

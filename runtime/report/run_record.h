#pragma once
// A finished (or running) run directory read back into typed rows for reports and listings: each seed's candidates
// (status, reward, speedup, stage times, node) and units (step, task, training loss). A line that is not JSON (a
// torn last line of a running run, a damaged file) and a record without the fields a row needs are left out the
// same way, one by one, and counted with their reasons so that a report can say what it did not show.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "crucible/eval/verdict.h"
#include "experiment/experiment.h"

namespace crucible::report {

// A directory that is not a run (no experiment.toml, no seed directories), an experiment it cannot read, or a record
// file that is not a regular file.
struct RunReadError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct Span {
  double start = 0, end = 0;
};

struct CandidateRow {
  uint64_t id = 0;
  std::string unit, task, node, device;
  int step = 0, turn = 0;
  eval::Status status = eval::Status::runtime_error;
  std::string reason;  // the first reason's code; empty: none
  double reward = 0;
  std::optional<double> speedup;
  std::string source_file;  // relative to the seed directory; empty: none (parse_error)
  int64_t tokens = 0;
  std::optional<Span> generate, compile, evaluate;
  double compile_seconds = 0, evaluation_seconds = 0;
};

struct UnitRow {
  std::string unit, task;  // task: the unit's task (ttt, best_of_n); empty for a grpo step
  int step = 0;
  std::optional<double> loss;  // the update's loss (one adapter), none without training
  std::optional<Span> train;
  double wall_seconds = 0;
};

struct SeedRun {
  int seed = 0;
  std::filesystem::path dir;  // <run>/seed-<seed>
  std::vector<CandidateRow> candidates;
  std::vector<UnitRow> units;
  bool finished = false;  // every unit committed: the run wrote its summary for this seed
};

// A line of a record file that the reader left out.
struct SkippedLine {
  std::filesystem::path file;
  std::size_t line = 0;  // 1-based
  std::string why;
};

struct RunRecord {
  std::filesystem::path dir;
  experiment::Experiment experiment;  // as the run's experiment.toml says
  std::vector<SeedRun> seeds;  // by seed number
  std::vector<std::string> tasks;  // the tasks the run recorded at its start and every task a candidate names, sorted
  std::vector<SkippedLine> skipped;  // in file and line order
  std::size_t repaired_lines = 0;    // read with lone surrogate escapes replaced by U+FFFD
};

// Throws RunReadError naming the path.
RunRecord load_run(const std::filesystem::path& dir);

// True when `dir` looks like a run directory (experiment.toml and at least one seed-N directory).
bool is_run_directory(const std::filesystem::path& dir);

}  // namespace crucible::report

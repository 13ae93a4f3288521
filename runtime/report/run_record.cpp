#include "report/run_record.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <tuple>

#include "report/recorded_experiment.h"
#include "run/jsonl.h"
#include "run/recorded_file.h"
#include "run/run_error.h"
#include "run/task_record.h"

namespace crucible::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<double> number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<Span> span(const json& times, const char* key) {
  auto it = times.find(key);
  if (it == times.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number())
    return std::nullopt;
  return Span{(*it)[0].get<double>(), (*it)[1].get<double>()};
}

std::optional<int> seed_number(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.rfind("seed-", 0) != 0 || name.size() == 5) return std::nullopt;
  try {
    std::size_t used = 0;
    const int n = std::stoi(name.substr(5), &used);
    if (used != name.size() - 5) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A record a row cannot be made of: skipped and counted like a line that is not JSON.
struct MalformedRecord : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

CandidateRow candidate_of(const json& c) {
  CandidateRow r;
  if (!c.is_object() || !c.contains("candidate_id") || !c["candidate_id"].is_number_unsigned() || !c.contains("status"))
    throw MalformedRecord("a record without candidate_id or status");
  r.id = c["candidate_id"].get<uint64_t>();
  r.unit = text(c, "unit");
  r.task = text(c, "task");
  r.node = text(c, "node");
  r.device = text(c, "device");
  r.step = static_cast<int>(number(c, "step").value_or(0));
  r.turn = static_cast<int>(number(c, "turn").value_or(0));
  try {
    r.status = eval::parse_status(text(c, "status"));
  } catch (const std::invalid_argument&) {
    throw MalformedRecord("candidate " + std::to_string(r.id) + " has an unknown status");
  }
  if (c.contains("reasons") && c["reasons"].is_array() && !c["reasons"].empty()) r.reason = text(c["reasons"][0], "code");
  r.reward = number(c, "reward").value_or(0.0);
  r.speedup = number(c, "speedup");
  r.source_file = text(c, "source_file");
  if (c.contains("tokens") && c["tokens"].is_array()) r.tokens = static_cast<int64_t>(c["tokens"].size());
  if (c.contains("times") && c["times"].is_object()) {
    const auto& t = c["times"];
    r.generate = span(t, "generate");
    r.compile = span(t, "compile");
    r.evaluate = span(t, "evaluate");
  }
  if (c.contains("compile") && c["compile"].is_object()) r.compile_seconds = number(c["compile"], "seconds").value_or(0.0);
  if (c.contains("verdict") && c["verdict"].is_object() && c["verdict"].contains("stages") &&
      c["verdict"]["stages"].is_object())
    r.evaluation_seconds = number(c["verdict"]["stages"], "total_s").value_or(0.0);
  return r;
}

UnitRow unit_of(const json& s) {
  if (!s.is_object()) throw MalformedRecord("a step record that is not a JSON object");
  UnitRow u;
  u.unit = text(s, "unit");
  u.task = text(s, "task");
  u.step = static_cast<int>(number(s, "step").value_or(0));
  if (s.contains("train") && s["train"].is_object()) u.loss = number(s["train"], "loss");
  if (s.contains("times") && s["times"].is_object()) u.train = span(s["times"], "train");
  u.wall_seconds = number(s, "wall_seconds").value_or(0.0);
  return u;
}

// Every row `row_of` can make of the file's records; the rest go to run.skipped with their line and reason.
template <typename Row, typename MakeRow>
std::vector<Row> read_rows(const fs::path& file, RunRecord& run, MakeRow row_of) {
  run::JsonlLines lines;
  try {
    lines = run::read_jsonl_lines(file);
  } catch (const run::RecordedFileError& e) {
    throw RunReadError(e.what());
  }
  for (const auto& s : lines.skipped) run.skipped.push_back({file, s.line, s.why});
  run.repaired_lines += lines.repaired;
  std::vector<Row> rows;
  for (std::size_t i = 0; i < lines.values.size(); ++i) {
    try {
      rows.push_back(row_of(lines.values[i]));
    } catch (const MalformedRecord& e) {
      run.skipped.push_back({file, lines.value_lines[i], e.what()});
    }
  }
  return rows;
}

// summary.json says which seeds finished; anything but a regular JSON file reads as "none finished".
json read_summary(const fs::path& dir) {
  try {
    return json::parse(run::read_regular_file(dir / "summary.json", std::size_t{64} << 20, /*follow_link=*/false),
                       nullptr, /*allow_exceptions=*/false);
  } catch (const run::RecordedFileError&) {
    return json();
  }
}

experiment::Experiment read_experiment(const fs::path& dir) {
  try {
    return read_recorded_experiment(dir);
  } catch (const std::exception& e) {
    throw RunReadError(e.what());
  }
}

// The tasks the run recorded at its start (none for runs from before the record).
std::vector<std::string> recorded_task_names(const fs::path& dir) {
  std::vector<std::string> names;
  try {
    if (auto record = run::read_task_record(dir))
      for (const auto& t : *record) names.push_back(t.name);
  } catch (const run::RunError& e) {
    throw RunReadError(e.what());
  }
  return names;
}

}  // namespace

bool is_run_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "experiment.toml", ec)) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory() && seed_number(entry.path())) return true;
  return false;
}

RunRecord load_run(const fs::path& dir) {
  if (!is_run_directory(dir))
    throw RunReadError(dir.string() + " is not a run directory (no experiment.toml with seed-N directories)");
  RunRecord run;
  run.dir = dir;
  run.experiment = read_experiment(dir);
  const json summary = read_summary(dir);
  const auto recorded = recorded_task_names(dir);
  std::set<std::string> tasks(recorded.begin(), recorded.end());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto seed = seed_number(entry.path());
    if (!entry.is_directory() || !seed) continue;
    SeedRun s;
    s.seed = *seed;
    s.dir = entry.path();
    s.candidates = read_rows<CandidateRow>(entry.path() / "candidates.jsonl", run, candidate_of);
    for (const auto& c : s.candidates) tasks.insert(c.task);
    s.units = read_rows<UnitRow>(entry.path() / "steps.jsonl", run, unit_of);
    s.finished = summary.is_object() && summary.contains("seeds") && summary["seeds"].is_object() &&
                 summary["seeds"].contains(std::to_string(*seed));
    run.seeds.push_back(std::move(s));
  }
  std::sort(run.seeds.begin(), run.seeds.end(), [](const SeedRun& a, const SeedRun& b) { return a.seed < b.seed; });
  run.tasks.assign(tasks.begin(), tasks.end());
  std::sort(run.skipped.begin(), run.skipped.end(), [](const SkippedLine& a, const SkippedLine& b) {
    return std::tie(a.file, a.line) < std::tie(b.file, b.line);
  });
  return run;
}

}  // namespace crucible::report

#include "report/run_record.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "run/jsonl.h"

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

CandidateRow candidate_of(const json& c, const fs::path& file) {
  CandidateRow r;
  if (!c.contains("candidate_id") || !c["candidate_id"].is_number_unsigned() || !c.contains("status"))
    throw RunReadError(file.string() + ": a record without candidate_id or status");
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
    throw RunReadError(file.string() + ": candidate " + std::to_string(r.id) + " has an unknown status");
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
  UnitRow u;
  u.unit = text(s, "unit");
  u.task = text(s, "task");
  u.step = static_cast<int>(number(s, "step").value_or(0));
  if (s.contains("train") && s["train"].is_object()) u.loss = number(s["train"], "loss");
  if (s.contains("times") && s["times"].is_object()) u.train = span(s["times"], "train");
  u.wall_seconds = number(s, "wall_seconds").value_or(0.0);
  return u;
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
  try {
    run.experiment = experiment::load_experiment(dir / "experiment.toml");
  } catch (const std::exception& e) {
    throw RunReadError(e.what());
  }
  std::ifstream summary_file(dir / "summary.json");
  json summary = summary_file ? json::parse(summary_file, nullptr, false) : json();
  if (summary.is_discarded()) summary = json();
  std::set<std::string> tasks;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto seed = seed_number(entry.path());
    if (!entry.is_directory() || !seed) continue;
    SeedRun s;
    s.seed = *seed;
    s.dir = entry.path();
    const auto candidates_file = entry.path() / "candidates.jsonl";
    for (const auto& c : run::read_jsonl(candidates_file, /*skip_malformed=*/true)) {
      s.candidates.push_back(candidate_of(c, candidates_file));
      tasks.insert(s.candidates.back().task);
    }
    for (const auto& u : run::read_jsonl(entry.path() / "steps.jsonl", /*skip_malformed=*/true))
      s.units.push_back(unit_of(u));
    s.finished = summary.is_object() && summary.contains("seeds") && summary["seeds"].contains(std::to_string(*seed));
    run.seeds.push_back(std::move(s));
  }
  std::sort(run.seeds.begin(), run.seeds.end(), [](const SeedRun& a, const SeedRun& b) { return a.seed < b.seed; });
  run.tasks.assign(tasks.begin(), tasks.end());
  return run;
}

}  // namespace crucible::report

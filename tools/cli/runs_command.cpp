// `crucible runs [DIR]`: the runs under a directory (default ./runs) with their mode, tasks, seeds, status and best
// results. `crucible show RUN CANDIDATE_ID [--seed N]`: one candidate's verdict, timings and source.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/terminal_text.h"
#include "report/run_record.h"
#include "run/jsonl.h"
#include "run/recorded_file.h"
#include "run/run_lock.h"

namespace crucible::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string status_of(const report::RunRecord& run) {
  if (run::RunLock::held(run.dir)) return "running";
  const bool finished = !run.seeds.empty() && std::all_of(run.seeds.begin(), run.seeds.end(),
                                                          [](const report::SeedRun& s) { return s.finished; });
  return finished ? "finished" : "stopped";
}

// Tasks with a correct kernel in every seed, and the geometric mean over tasks of the best speedups (mean over
// seeds), as "3/4 tasks correct, best speedup geomean 1.21x".
std::string best_results(const report::RunRecord& run) {
  std::size_t correct = 0;
  double log_sum = 0;
  for (const auto& task : run.tasks) {
    double best_mean = 0;
    bool every_seed = true;
    for (const auto& s : run.seeds) {
      double best = 0;
      for (const auto& c : s.candidates)
        if (c.task == task && c.status == eval::Status::correct) best = std::max(best, c.speedup.value_or(0));
      every_seed = every_seed && best > 0;
      best_mean += best / run.seeds.size();
    }
    if (every_seed) {
      ++correct;
      log_sum += std::log(best_mean);
    }
  }
  std::ostringstream out;
  out << correct << "/" << run.tasks.size() << " tasks correct";
  if (correct) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3gx", std::exp(log_sum / correct));
    out << ", best speedup geomean " << buf;
  }
  return out.str();
}

int runs(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::cerr << "error: " << dir << " is not a directory\n";
    return 2;
  }
  std::vector<fs::path> found;
  if (report::is_run_directory(dir)) found.push_back(dir);
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory() && report::is_run_directory(entry.path())) found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  if (found.empty()) {
    std::cout << "no runs in " << dir << "\n";
    return 0;
  }
  std::printf("%-40s %-10s %6s %6s %-9s %s\n", "RUN", "MODE", "TASKS", "SEEDS", "STATUS", "BEST");
  for (const auto& path : found) {
    try {
      const auto run = report::load_run(path);
      std::printf("%-40s %-10s %6zu %6zu %-9s %s\n", printable(path.string()).c_str(),
                  experiment::run_mode_name(run.experiment.mode).c_str(), run.tasks.size(), run.seeds.size(),
                  status_of(run).c_str(), best_results(run).c_str());
    } catch (const std::exception& e) {
      std::printf("%-40s unreadable: %s\n", printable(path.string()).c_str(), printable(e.what()).c_str());
    }
  }
  return 0;
}

std::string number(const json& j) {
  if (!j.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", j.get<double>());
  return buf;
}

// A record's text field made printable; empty when absent or not a string (records are untrusted).
std::string string_at(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? printable(it->get<std::string>()) : std::string();
}

int show(const std::string& run_dir, uint64_t id, std::optional<int> seed) {
  if (!report::is_run_directory(run_dir)) {
    std::cerr << "error: " << run_dir << " is not a run directory\n";
    return 2;
  }
  std::vector<std::pair<fs::path, json>> matches;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("seed-", 0) != 0) continue;
    if (seed && name != "seed-" + std::to_string(*seed)) continue;
    run::JsonlLines lines;
    try {
      lines = run::read_jsonl_lines(entry.path() / "candidates.jsonl");
    } catch (const run::RecordedFileError& e) {
      std::cerr << "warning: " << printable(e.what()) << "\n";
      continue;
    }
    for (auto& c : lines.values)
      if (c.is_object() && c.contains("candidate_id") && c["candidate_id"].is_number_unsigned() &&
          c["candidate_id"].get<uint64_t>() == id)
        matches.emplace_back(entry.path(), std::move(c));
  }
  if (matches.empty()) {
    std::cerr << "error: no candidate " << id << " in " << run_dir << (seed ? " seed " + std::to_string(*seed) : "")
              << " (ids are in seed-N/candidates.jsonl, or in `crucible report`'s best-kernel table)\n";
    return 2;
  }
  if (matches.size() > 1) {
    std::cerr << "error: candidate " << id << " is in several seeds:";
    for (const auto& m : matches) std::cerr << " " << m.first.filename().string();
    std::cerr << "; choose one with --seed N\n";
    return 2;
  }
  const auto& [seed_dir, c] = matches.front();
  auto text = [&](const char* key) { return c.contains(key) && c[key].is_string() ? printable(c[key].get<std::string>()) : "-"; };
  std::cout << "candidate " << id << " (" << seed_dir.filename().string() << ", " << text("unit") << ")\n"
            << "task:      " << text("task") << "\n"
            << "status:    " << text("status") << "\n";
  if (c.contains("reasons") && c["reasons"].is_array())
    for (const auto& r : c["reasons"])
      if (r.is_object())
        std::cout << "reason:    " << string_at(r, "code") << ": " << string_at(r, "detail") << "\n";
  std::cout << "speedup:   " << number(c.value("speedup", json())) << "\n"
            << "reward:    " << number(c.value("reward", json())) << "   advantage: " << number(c.value("advantage", json()))
            << "\n"
            << "times:     candidate median " << number(c.value("candidate_median_us", json())) << " us, reference median "
            << number(c.value("reference_median_us", json())) << " us\n";
  if (c.contains("times") && c["times"].is_object()) {
    std::cout << "stages:   ";
    for (const char* stage : {"generate", "compile", "evaluate", "train"}) {
      const auto& t = c["times"];
      if (t.contains(stage) && t[stage].is_array() && t[stage].size() == 2 && t[stage][0].is_number() &&
          t[stage][1].is_number())
        std::cout << " " << stage << " " << number(t[stage][1].get<double>() - t[stage][0].get<double>()) << " s";
    }
    std::cout << "\n";
  }
  std::cout << "node:      " << text("node") << " " << text("device") << "\n";
  if (c.contains("compile") && c["compile"].is_object() && !string_at(c["compile"], "log").empty())
    std::cout << "compiler output:\n" << string_at(c["compile"], "log") << "\n";
  if (c.contains("source_file") && c["source_file"].is_string()) {
    const std::string file = c["source_file"].get<std::string>();
    try {
      const std::string source = run::read_recorded_source(seed_dir, file);
      std::cout << "source (" << printable((seed_dir / file).string()) << "):\n" << printable(source) << "\n";
    } catch (const run::RecordedFileError& e) {
      std::cout << "source: not shown: " << printable(e.what()) << "\n";
    }
  } else {
    std::cout << "policy output (no source was assembled):\n" << text("policy_output") << "\n";
  }
  return 0;
}

}  // namespace

Run add_runs_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>("runs");
  auto* cmd = app.add_subcommand("runs", "List the runs under a directory: mode, tasks, seeds, status, best results");
  cmd->add_option("dir", *dir, "A directory of runs, or a run")->capture_default_str();
  return [cmd, dir]() -> int { return cmd->parsed() ? runs(*dir) : -1; };
}

Run add_show_command(CLI::App& app) {
  struct Args {
    std::string run;
    uint64_t id = 0;
    std::optional<int> seed;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("show", "One candidate of a run: verdict, reasons, timings, compiler output, source");
  cmd->add_option("run", args->run, "Run directory")->required();
  cmd->add_option("candidate", args->id, "Candidate id (candidate_id in candidates.jsonl)")->required();
  cmd->add_option("--seed", args->seed, "The seed, where several hold the id");
  return [cmd, args]() -> int { return cmd->parsed() ? show(args->run, args->id, args->seed) : -1; };
}

}  // namespace crucible::cli

#include "modes/run_summary.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "run/jsonl.h"

namespace crucible::modes {
namespace {

using nlohmann::json;

double num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; }

void add_budget(json& total, const json& unit) {
  if (!unit.contains("budget")) return;
  for (const auto& [k, v] : unit["budget"].items()) total[k] = total.value(k, 0.0) + v.get<double>();
}

json summarise_grpo(const std::vector<json>& steps, std::ostream& text) {
  json s, curve = json::array(), budget = json::object();
  for (const auto& st : steps) {
    curve.push_back({{"step", st["step"]}, {"reward_mean", st["reward_mean"]}, {"reward_max", st["reward_max"]},
                     {"correct", st["correct"]}, {"fast_1", st["fast_1"]}, {"geomean_speedup", st["geomean_speedup"]}});
    add_budget(budget, st);
  }
  s["curve"] = curve;
  s["budget"] = budget;
  if (!steps.empty()) {
    s["first_reward_mean"] = num(steps.front(), "reward_mean");
    s["last_reward_mean"] = num(steps.back(), "reward_mean");
    char line[160];
    std::snprintf(line, sizeof line, "  reward mean: first step %.3f -> last step %.3f over %zu steps\n",
                  num(steps.front(), "reward_mean"), num(steps.back(), "reward_mean"), steps.size());
    text << line;
  }
  return s;
}

json summarise_best_of_n(const std::vector<json>& units, std::ostream& text) {
  json s, tasks = json::object(), budget = json::object();
  for (const auto& u : units) {
    add_budget(budget, u);
    tasks[u.value("task", "?")] = {{"best", u.value("best", json())}, {"correct", u["correct"]},
                                   {"fast_1", u["fast_1"]}, {"budget", u.value("budget", json())}};
    const json best = u.value("best", json());
    char line[200];
    std::snprintf(line, sizeof line, "  %-14s best reward %.3f (%s) of %d samples\n", u.value("task", "?").c_str(),
                  best.is_object() ? num(best, "reward") : 0.0,
                  best.is_object() ? best.value("status", "?").c_str() : "-", static_cast<int>(num(u, "samples")));
    text << line;
  }
  s["tasks"] = tasks;
  s["budget"] = budget;
  return s;
}

json summarise_ttt(const std::vector<json>& units, std::ostream& text) {
  std::map<std::string, std::vector<const json*>> by_task;
  json s, tasks = json::object(), budget = json::object();
  for (const auto& u : units) by_task[u.value("task", "?")].push_back(&u), add_budget(budget, u);
  for (auto& [task, steps] : by_task) {
    json curve = json::array(), best_kernel, best_step;
    for (const json* st : steps) {
      curve.push_back({{"step", (*st)["step"]}, {"reward_mean", (*st)["reward_mean"]}, {"reward_max", (*st)["reward_max"]}});
      if (st->contains("best") && (best_kernel.is_null() || num((*st)["best"], "reward") > num(best_kernel, "reward"))) {
        best_kernel = (*st)["best"];
        best_kernel["step"] = (*st)["step"];
      }
      if (best_step.is_null() || num(*st, "reward_mean") > num(best_step, "reward_mean"))
        best_step = {{"step", (*st)["step"]}, {"reward_mean", (*st)["reward_mean"]}};
    }
    tasks[task] = {{"curve", curve}, {"best_kernel", best_kernel}, {"best_step", best_step}};
    char line[200];
    std::snprintf(line, sizeof line, "  %-14s best kernel reward %.3f at step %d; best batch step %d (mean %.3f)\n",
                  task.c_str(), num(best_kernel, "reward"), best_kernel.is_object() ? best_kernel.value("step", 0) : -1,
                  best_step.value("step", -1), num(best_step, "reward_mean"));
    text << line;
  }
  s["tasks"] = tasks;
  s["budget"] = budget;
  return s;
}

}  // namespace

namespace {

// Per evaluator node over the whole run: candidates, evaluation seconds and throughput, evaluator errors (from the
// units' metrics), and times lost and late results discarded (from cluster.jsonl). Empty for a run without nodes.
json summarise_nodes(const std::filesystem::path& seed_dir, const std::vector<json>& units, std::ostringstream& text) {
  json nodes = json::object();
  for (const auto& u : units) {
    if (!u.contains("nodes")) continue;
    for (const auto& [name, m] : u["nodes"].items()) {
      auto& n = nodes[name];
      if (n.is_null()) n = {{"candidates", 0}, {"evaluation_seconds", 0.0}, {"evaluator_errors", 0}, {"lost", 0},
                            {"late_results", 0}};
      n["candidates"] = n["candidates"].get<int>() + m.value("candidates", 0);
      n["evaluation_seconds"] = n["evaluation_seconds"].get<double>() + m.value("evaluation_seconds", 0.0);
      n["evaluator_errors"] = n["evaluator_errors"].get<int>() + m.value("evaluator_errors", 0);
    }
  }
  if (std::filesystem::exists(seed_dir / "cluster.jsonl"))
    for (const auto& event : run::read_jsonl(seed_dir / "cluster.jsonl", true)) {
      const std::string kind = event.value("event", ""), name = event.value("node", "");
      if ((kind != "lost" && kind != "late_result") || !nodes.contains(name)) continue;
      auto& counter = nodes[name][kind == "lost" ? "lost" : "late_results"];
      counter = counter.get<int>() + 1;
    }
  if (nodes.size() < 2 && !std::filesystem::exists(seed_dir / "cluster.jsonl")) return json::object();
  for (auto& [name, n] : nodes.items()) {
    const double seconds = n["evaluation_seconds"].get<double>();
    n["candidates_per_evaluation_second"] = seconds > 0 ? n["candidates"].get<double>() / seconds : 0.0;
    text << "  node " << name << ": " << n["candidates"].get<int>() << " candidates, " << n["evaluator_errors"].get<int>()
         << " evaluator errors, lost " << n["lost"].get<int>() << " times, " << n["late_results"].get<int>()
         << " late results discarded\n";
  }
  return nodes;
}

}  // namespace

std::string write_run_summary(const std::filesystem::path& dir, const experiment::Experiment& e) {
  json summary;
  summary["experiment"] = e.name;
  summary["mode"] = experiment::run_mode_name(e.mode);
  std::ostringstream text;
  for (uint64_t seed : e.seeds) {
    const auto units = run::read_jsonl(dir / ("seed-" + std::to_string(seed)) / "steps.jsonl", true);
    text << "seed " << seed << " (" << units.size() << " units):\n";
    switch (e.mode) {
      case experiment::RunMode::grpo: summary["seeds"][std::to_string(seed)] = summarise_grpo(units, text); break;
      case experiment::RunMode::best_of_n: summary["seeds"][std::to_string(seed)] = summarise_best_of_n(units, text); break;
      case experiment::RunMode::ttt: summary["seeds"][std::to_string(seed)] = summarise_ttt(units, text); break;
    }
    auto nodes = summarise_nodes(dir / ("seed-" + std::to_string(seed)), units, text);
    if (!nodes.empty()) summary["seeds"][std::to_string(seed)]["nodes"] = nodes;
  }
  // Each start of the run (the first and every resume): commit, machine, GPUs, load average.
  summary["starts"] = run::read_jsonl(dir / "starts.jsonl", /*skip_malformed=*/true);
  std::ofstream(dir / "summary.json") << summary.dump(2) << "\n";
  return text.str();
}

}  // namespace crucible::modes

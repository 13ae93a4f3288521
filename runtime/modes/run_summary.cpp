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

std::string write_run_summary(const std::filesystem::path& dir, const experiment::Experiment& e) {
  json summary;
  summary["experiment"] = e.name;
  summary["mode"] = experiment::mode_name(e.mode);
  std::ostringstream text;
  for (uint64_t seed : e.seeds) {
    const auto units = run::read_jsonl(dir / ("seed-" + std::to_string(seed)) / "steps.jsonl", true);
    text << "seed " << seed << " (" << units.size() << " units):\n";
    switch (e.mode) {
      case experiment::Mode::grpo: summary["seeds"][std::to_string(seed)] = summarise_grpo(units, text); break;
      case experiment::Mode::best_of_n: summary["seeds"][std::to_string(seed)] = summarise_best_of_n(units, text); break;
      case experiment::Mode::ttt: summary["seeds"][std::to_string(seed)] = summarise_ttt(units, text); break;
    }
  }
  std::ofstream(dir / "summary.json") << summary.dump(2) << "\n";
  return text.str();
}

}  // namespace crucible::modes

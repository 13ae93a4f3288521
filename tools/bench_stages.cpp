// bench_stages RUN_DIR...: how busy each stage of a finished run was, and how a step's wall time compares with its
// slowest stage. Reads the run directory only (candidates.jsonl, steps.jsonl, node.json), so it measures exactly
// what `crucible run` did. Usage: crucible run configs/bench/sweep_cpu.toml --out /tmp/b && bench_stages /tmp/b
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "run/jsonl.h"

namespace fs = std::filesystem;
using crucible::run::read_jsonl;
using nlohmann::json;

namespace {

struct Interval {
  double start = 0, end = 0;
  double length() const { return end - start; }
};

Interval span(const json& record, const char* stage) {
  const auto& t = record["times"];
  if (!t.contains(stage) || !t[stage].is_array()) return {};
  return {t[stage][0].get<double>(), t[stage][1].get<double>()};
}

// Length of the union of intervals: the time a stage had at least one item in hand.
double union_length(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  double total = 0, start = 0, end = -1e300;
  for (const auto& i : v) {
    if (i.start > end) {
      if (end > start) total += end - start;
      start = i.start;
      end = i.end;
    } else {
      end = std::max(end, i.end);
    }
  }
  if (end > start) total += end - start;
  return total;
}

struct StageWork {
  double generate = 0, compile = 0, evaluate = 0, train = 0;  // seconds of work, each stage's capacity applied
};

void report(const fs::path& seed_dir) {
  const auto node = json::parse(std::ifstream(seed_dir / "node.json"));
  const int compilers = node["compile_workers"], evaluators = node["evaluators"];
  const auto records = read_jsonl(seed_dir / "candidates.jsonl");
  if (records.empty()) return;
  double first = 1e300, last = 0;
  std::vector<Interval> generate, train_spans;
  double compile_s = 0, evaluate_s = 0;
  std::map<std::string, StageWork> per_unit;
  std::map<std::string, double> committed;
  std::map<std::string, Interval> unit_train;
  for (const auto& r : records) {
    const std::string unit = r["unit"];
    auto g = span(r, "generate"), c = span(r, "compile"), e = span(r, "evaluate"), t = span(r, "train");
    first = std::min(first, g.start);
    last = std::max(last, r["times"]["committed"].get<double>());
    committed[unit] = r["times"]["committed"].get<double>();
    generate.push_back(g);
    compile_s += c.length();
    evaluate_s += e.length();
    if (t.length() > 0) unit_train[unit] = t;
    auto& w = per_unit[unit];
    w.compile += c.length() / compilers;
    w.evaluate += e.length() / evaluators;
    w.generate = std::max(w.generate, g.length());
  }
  double train_s = 0;
  for (const auto& [unit, t] : unit_train) train_s += t.length(), per_unit[unit].train = t.length();
  const double wall = last - first;
  std::printf("%s: %zu candidates, %zu units, wall %.1f s, %d compile workers, %d evaluators\n",
              seed_dir.string().c_str(), records.size(), per_unit.size(), wall, compilers, evaluators);
  std::printf("  %-10s %10s %8s\n", "stage", "busy s", "busy %");
  std::printf("  %-10s %10.2f %7.1f%%\n", "generate", union_length(generate), 100 * union_length(generate) / wall);
  std::printf("  %-10s %10.2f %7.1f%%\n", "compile", compile_s, 100 * compile_s / (wall * compilers));
  std::printf("  %-10s %10.2f %7.1f%%\n", "evaluate", evaluate_s, 100 * evaluate_s / (wall * evaluators));
  std::printf("  %-10s %10.2f %7.1f%%\n", "train", train_s, 100 * train_s / wall);

  // Steady state: the time between consecutive commits against the slowest stage's share of that unit's work.
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [unit, t] : committed) order.emplace_back(t, unit);
  std::sort(order.begin(), order.end());
  if (order.size() < 3) return;
  double step_wall = 0, slowest = 0;
  std::printf("  %-22s %8s %8s %8s %8s %8s %9s %6s\n", "unit", "wall s", "gen s", "comp s", "eval s", "train s",
              "slowest", "ratio");
  for (std::size_t i = 1; i < order.size(); ++i) {
    const auto& w = per_unit[order[i].second];
    const double dt = order[i].first - order[i - 1].first;
    const double slow = std::max({w.generate, w.compile, w.evaluate, w.train});
    const char* name = slow == w.evaluate ? "evaluate" : slow == w.compile ? "compile" : slow == w.train ? "train" : "generate";
    std::printf("  %-22s %8.2f %8.3f %8.2f %8.2f %8.3f %9s %6.2f\n", order[i].second.c_str(), dt, w.generate, w.compile,
                w.evaluate, w.train, name, dt / slow);
    step_wall += dt;
    slowest += slow;
  }
  std::printf("  steady state (units 2..%zu): mean unit wall %.2f s, mean slowest stage %.2f s, ratio %.2f\n",
              order.size(), step_wall / (order.size() - 1), slowest / (order.size() - 1), step_wall / slowest);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("usage: bench_stages RUN_DIR...  (how busy each stage of a finished run was)\n");
      return 0;
    }
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_stages RUN_DIR...\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (!fs::is_directory(argv[i], ec)) {
      std::fprintf(stderr, "bench_stages: %s is not a run directory\n", argv[i]);
      return 2;
    }
  }
  for (int i = 1; i < argc; ++i)
    for (const auto& entry : fs::directory_iterator(argv[i]))
      if (entry.is_directory() && fs::exists(entry.path() / "node.json")) report(entry.path());
  return 0;
}

// bench_cluster: evaluation throughput of runs whose candidates were judged by evaluator nodes, and what the
// coordinator added per candidate. Reads run directories (tools/gpu_node/bench_cluster.sh makes them) and prints a
// table: throughput from the first hand-out to the last verdict, scaling against the first run, and per candidate
// the hand-out-and-back time beyond the evaluation itself (the network round trip plus the coordinator's work), and
// each node's idle gap between one verdict and its next candidate (its pull's round trip). Per node: candidates a
// second, the load stage (a candidate waiting for a ready worker, then loading into it) and the CUDA contexts the
// node created (its workers started, from the "worker counts" lines in RUN_DIR/node-outputs/, which
// bench_cluster.sh keeps with CRUCIBLE_WORKER_COUNTS set).
// Usage: bench_cluster LABEL=RUN_DIR [LABEL=RUN_DIR ...]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "run/jsonl.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

struct Row {
  std::string label;
  std::size_t candidates = 0, correct = 0, nodes = 0;
  double seconds = 0, per_s = 0;
  double overhead_p50_ms = 0, overhead_p90_ms = 0, overhead_max_ms = 0;
  double gap_p50_ms = 0, gap_p90_ms = 0;
  double coordinator_cpu_ms = -1;  // per candidate; -1: not measured
  std::map<std::string, int> per_node;
  // Where each node's share of the run went, on the coordinator's clock from the first hand-out.
  struct NodeTime {
    int candidates = 0;
    double first_out = 1e300, last_back = 0, evaluate_s = 0;
    std::vector<double> evaluate_ms, load_ms;
    int contexts = -1, reused = -1;  // from the node's worker counts; -1: not recorded
  };
  std::map<std::string, NodeTime> node_time;
  int waited_on_policy = 0;  // handed out within 50 ms of being generated: the policy, not a node, was the limit
};

// "worker counts cuda:0: started 5 reused 120 ..." lines of each node's output (NODE.out), summed over its GPUs.
void read_worker_counts(const fs::path& outputs, std::map<std::string, Row::NodeTime>& nodes) {
  if (!fs::is_directory(outputs)) return;
  for (const auto& f : fs::directory_iterator(outputs)) {
    auto it = nodes.find(f.path().stem().string());
    if (it == nodes.end()) continue;
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      int started = 0, reused = 0;
      const auto at = line.find("worker counts cuda:");
      if (at == std::string::npos) continue;
      const auto colon = line.find(": started ", at);
      if (colon == std::string::npos || std::sscanf(line.c_str() + colon, ": started %d reused %d", &started, &reused) != 2)
        continue;
      it->second.contexts = std::max(it->second.contexts, 0) + started;
      it->second.reused = std::max(it->second.reused, 0) + reused;
    }
  }
}

Row measure(const std::string& label, const fs::path& dir) {
  Row r;
  r.label = label;
  double first = 1e300, last = 0;
  std::vector<double> overhead;
  std::map<std::string, std::vector<std::pair<double, double>>> busy;  // node -> evaluate intervals
  for (const auto& seed : fs::directory_iterator(dir)) {
    if (!fs::exists(seed.path() / "candidates.jsonl")) continue;
    for (const auto& c : crucible::run::read_jsonl(seed.path() / "candidates.jsonl")) {
      ++r.candidates;
      r.correct += c.value("status", "") == "correct";
      ++r.per_node[c.value("node", "?")];
      const auto& t = c["times"];
      if (!t.contains("dispatch") || !t.contains("evaluate")) continue;
      const double out = t["dispatch"][0], back = t["dispatch"][1];
      const double start = t["evaluate"][0], end = t["evaluate"][1];
      first = std::min(first, out);
      last = std::max(last, back);
      overhead.push_back(1000 * ((back - out) - (end - start)));
      busy[c.value("node", "?") + "/" + c.value("device", "?")].push_back({start, end});
      auto& nt = r.node_time[c.value("node", "?")];
      ++nt.candidates;
      nt.first_out = std::min(nt.first_out, out);
      nt.last_back = std::max(nt.last_back, back);
      nt.evaluate_s += end - start;
      nt.evaluate_ms.push_back(1000 * (end - start));
      if (const auto& v = c["verdict"]; v.is_object() && v.contains("stages") && v["stages"].contains("load_s"))
        nt.load_ms.push_back(1000 * v["stages"]["load_s"].get<double>());
      if (t.contains("generate") && t["generate"].is_array() && out - t["generate"][1].get<double>() < 0.05)
        ++r.waited_on_policy;
    }
  }
  read_worker_counts(dir / "node-outputs", r.node_time);
  std::vector<double> gaps;
  for (auto& [evaluator, intervals] : busy) {
    std::sort(intervals.begin(), intervals.end());
    for (std::size_t i = 1; i < intervals.size(); ++i) gaps.push_back(1000 * (intervals[i].first - intervals[i - 1].second));
  }
  r.gap_p50_ms = percentile(gaps, 0.5);
  r.gap_p90_ms = percentile(gaps, 0.9);
  r.nodes = r.per_node.size();
  r.seconds = last > first ? last - first : 0;
  r.per_s = r.seconds > 0 ? static_cast<double>(r.candidates) / r.seconds : 0;
  r.overhead_p50_ms = percentile(overhead, 0.5);
  r.overhead_p90_ms = percentile(overhead, 0.9);
  r.overhead_max_ms = overhead.empty() ? 0 : *std::max_element(overhead.begin(), overhead.end());
  // CPU seconds of the whole coordinator process (policy, telemetry and all), if the script recorded them.
  if (std::ifstream cpu(dir / "coordinator_cpu_seconds"); cpu) {
    double s = 0;
    if (cpu >> s && r.candidates) r.coordinator_cpu_ms = 1000 * s / static_cast<double>(r.candidates);
  }
  return r;
}

std::string count_text(int n) { return n < 0 ? "-" : std::to_string(n); }

// Busy share: evaluation time over the node's span from the run's first hand-out to its own last verdict. A low
// share with a late first hand-out is start-up; a low share throughout is waiting for work.
void print_node_table(const std::vector<Row>& rows) {
  std::printf("\n| run | node | candidates | candidates/s | first hand-out s | last verdict s | evaluating s | busy share | "
              "evaluation p50 ms | load p50 / p90 ms | CUDA contexts created | workers reused |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    double start = 1e300;
    for (const auto& [node, nt] : r.node_time) start = std::min(start, nt.first_out);
    for (const auto& [node, nt] : r.node_time) {
      const double span = nt.last_back - start;
      std::printf("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f | %.0f / %.0f | %s | %s |\n",
                  r.label.c_str(), node.c_str(), nt.candidates, span > 0 ? nt.candidates / span : 0,
                  nt.first_out - start, span, nt.evaluate_s, span > 0 ? 100 * nt.evaluate_s / span : 0,
                  percentile(nt.evaluate_ms, 0.5), percentile(nt.load_ms, 0.5), percentile(nt.load_ms, 0.9),
                  count_text(nt.contexts).c_str(), count_text(nt.reused).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cluster LABEL=RUN_DIR [LABEL=RUN_DIR ...]\n");
    return 2;
  }
  std::vector<Row> rows;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos || !fs::is_directory(arg.substr(eq + 1))) {
      std::fprintf(stderr, "not LABEL=RUN_DIR: %s\n", arg.c_str());
      return 2;
    }
    rows.push_back(measure(arg.substr(0, eq), arg.substr(eq + 1)));
  }
  std::printf("| run | nodes | candidates | correct | seconds | candidates/s | vs first | hand-out overhead p50 / p90 / max (ms) | node idle gap p50 / p90 (ms) | coordinator CPU per candidate (ms) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf("| %s | %zu | %zu | %zu | %.1f | %.2f | %.2fx | %.2f / %.2f / %.2f | %.2f / %.2f | ", r.label.c_str(),
                r.nodes, r.candidates, r.correct, r.seconds, r.per_s,
                rows.front().per_s > 0 ? r.per_s / rows.front().per_s : 0, r.overhead_p50_ms, r.overhead_p90_ms,
                r.overhead_max_ms, r.gap_p50_ms, r.gap_p90_ms);
    if (r.coordinator_cpu_ms >= 0) std::printf("%.2f |\n", r.coordinator_cpu_ms);
    else std::printf("- |\n");
  }
  std::printf("\nper node:\n");
  for (const auto& r : rows) {
    std::printf("  %s:", r.label.c_str());
    for (const auto& [node, n] : r.per_node) std::printf(" %s %d", node.c_str(), n);
    std::printf("; %d candidates handed out within 50 ms of being generated\n", r.waited_on_policy);
  }
  print_node_table(rows);
  return 0;
}

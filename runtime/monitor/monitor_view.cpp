#include "monitor/monitor_view.h"

#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

#include "report/report.h"

namespace crucible::monitor {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Text from candidates, compilers and logs may hold bytes that are not UTF-8; JSON output replaces them.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json live_json(const LiveSnapshot& s) {
  return {{"experiment", s.experiment},
          {"mode", s.mode},
          {"seed", s.seed},
          {"seed_index", s.seed_index},
          {"seeds", s.seeds},
          {"units_total", s.units_total},
          {"units_committed", s.units_committed},
          {"units_by_phase", s.units_by_phase},
          {"latest_unit", s.latest_unit},
          {"candidates_done", s.candidates_done},
          {"candidates_in_flight", s.candidates_in_flight},
          {"compile_queue", s.compile_queue},
          {"evaluation_queue", s.evaluation_queue},
          {"evaluators_idle", s.evaluators_idle},
          {"actors", s.actors},
          {"finished", s.finished}};
}

const char* level_text(log::Level l) {
  static const char* const names[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  return names[static_cast<int>(l)];
}

}  // namespace

std::string status_json(const LiveSnapshot& live, const fs::path& run_dir, double now) {
  json out{{"live", live_json(live)}, {"curves", json::array()}, {"recent", json::array()}};
  const auto eta = eta_seconds(live, now);
  out["eta_seconds"] = eta ? json(*eta) : json(nullptr);
  out["elapsed_seconds"] = now - live.started_at;
  if (!report::is_run_directory(run_dir)) return dump(out);
  try {
    const auto run = report::load_run(run_dir);
    const auto r = report::build_report({run});
    for (const auto& c : r.charts) {
      json points = json::array();
      if (!c.series.empty())
        for (std::size_t i = 0; i < c.series[0].steps.size(); ++i)
          points.push_back({c.series[0].steps[i], c.series[0].points[i].mean});
      out["curves"].push_back({{"id", c.id}, {"title", c.title}, {"points", std::move(points)}});
    }
    // The last verdicts of the seed running now (or the last seed).
    for (auto it = run.seeds.rbegin(); it != run.seeds.rend(); ++it) {
      if (it->seed != static_cast<int>(live.seed) && live.seed_started_at > 0) continue;  // before any seed: the last
      const auto& cands = it->candidates;
      const std::size_t from = cands.size() > 20 ? cands.size() - 20 : 0;
      for (std::size_t i = cands.size(); i-- > from;) {
        const auto& c = cands[i];
        out["recent"].push_back({{"id", c.id}, {"unit", c.unit}, {"task", c.task},
                                 {"status", std::string(eval::status_name(c.status))}, {"reason", c.reason},
                                 {"speedup", c.speedup ? json(*c.speedup) : json(nullptr)}, {"reward", c.reward}});
      }
      break;
    }
  } catch (const std::exception& e) {
    out["records_error"] = e.what();  // a record being written, or a run without one yet: the rest still shows
  }
  return dump(out);
}

std::string logs_json(const fs::path& run_dir, const run::LogFilter& filter, std::size_t limit) {
  json out{{"entries", json::array()}, {"actors", json::array()}, {"nodes", json::array()}};
  const fs::path logs = run_dir / "logs";
  if (!fs::is_directory(logs)) return dump(out);
  const auto all = run::read_logs(logs, run::LogFilter{});
  std::set<std::string> actors, nodes;
  std::vector<const run::LogEntry*> kept;
  for (const auto& e : all) {
    actors.insert(e.actor);
    nodes.insert(e.node);
    if (filter.accepts(e)) kept.push_back(&e);
  }
  const std::size_t from = kept.size() > limit ? kept.size() - limit : 0;
  for (std::size_t i = from; i < kept.size(); ++i) {
    const auto& e = *kept[i];
    // The message without the line's own time, level and [actor] prefix, which have columns of their own.
    std::string text = e.text;
    if (text.rfind(e.timestamp, 0) == 0)
      if (const auto close = text.find("] "); close != std::string::npos) text = text.substr(close + 2);
    out["entries"].push_back({{"time", e.timestamp}, {"level", level_text(e.level)},
                              {"actor", e.actor}, {"node", e.node}, {"text", text}});
  }
  out["actors"] = actors;
  out["nodes"] = nodes;
  return dump(out);
}

std::string prometheus_metrics(const LiveSnapshot& s, double now) {
  std::ostringstream out;
  auto gauge = [&](const char* name, const char* help, double value, const std::string& labels = "") {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n"
        << name << labels << " " << value << "\n";
  };
  gauge("crucible_units_total", "Units (steps or tasks) of the current seed.", double(s.units_total));
  gauge("crucible_units_committed", "Units of the current seed committed so far.", double(s.units_committed));
  out << "# HELP crucible_units Units of the current seed by phase.\n# TYPE crucible_units gauge\n";
  for (const auto& [phase, n] : s.units_by_phase) out << "crucible_units{phase=\"" << phase << "\"} " << n << "\n";
  out << "# HELP crucible_candidates_done_total Candidates committed by this process.\n"
         "# TYPE crucible_candidates_done_total counter\ncrucible_candidates_done_total "
      << s.candidates_done << "\n";
  gauge("crucible_candidates_in_flight", "Candidates generated and not yet committed.", double(s.candidates_in_flight));
  gauge("crucible_compile_queue", "Candidates waiting for a compiler.", double(s.compile_queue));
  gauge("crucible_evaluation_queue", "Candidates waiting for an evaluator.", double(s.evaluation_queue));
  gauge("crucible_evaluators_idle", "Evaluators waiting for work.", double(s.evaluators_idle));
  gauge("crucible_seed_index", "Which seed runs now (from 0).", double(s.seed_index));
  gauge("crucible_elapsed_seconds", "Seconds since this process started.", now - s.started_at);
  if (const auto eta = eta_seconds(s, now)) gauge("crucible_eta_seconds", "Estimated seconds left over all seeds.", *eta);
  return out.str();
}

}  // namespace crucible::monitor

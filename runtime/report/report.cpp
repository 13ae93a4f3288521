#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "run/recorded_file.h"

namespace crucible::report {
namespace {

constexpr eval::Status kStatuses[] = {eval::Status::parse_error,   eval::Status::compile_error, eval::Status::rejected,
                                      eval::Status::incorrect,     eval::Status::runtime_error, eval::Status::timeout,
                                      eval::Status::correct};

std::string label_of(const RunRecord& run) { return run.experiment.name + " (" + run.dir.filename().string() + ")"; }

// fast_p: correct and faster than p times the reference; fast_0 is the correct share (a speedup need not be measured).
bool fast(const CandidateRow& c, double p) {
  return c.status == eval::Status::correct && (p <= 0 || (c.speedup && *c.speedup > p));
}

// fast_p's name as a column: fast_0, fast_1, fast_1.2
std::string fast_name(double p) {
  std::ostringstream s;
  s << "fast_" << p;
  return s.str();
}

// Per seed, the candidates of each step.
std::map<int, std::map<int, std::vector<const CandidateRow*>>> by_step(const RunRecord& run) {
  std::map<int, std::map<int, std::vector<const CandidateRow*>>> out;  // step -> seed -> candidates
  for (const auto& s : run.seeds)
    for (const auto& c : s.candidates) out[c.step][s.seed].push_back(&c);
  return out;
}

// The best candidate of a task in one seed: the fastest correct one, else the highest reward.
const CandidateRow* best_of(const SeedRun& seed, const std::string& task) {
  const CandidateRow* best = nullptr;
  auto better = [](const CandidateRow& a, const CandidateRow& b) {
    const bool ac = a.status == eval::Status::correct, bc = b.status == eval::Status::correct;
    if (ac != bc) return ac;
    if (ac && a.speedup.value_or(0) != b.speedup.value_or(0)) return a.speedup.value_or(0) > b.speedup.value_or(0);
    return a.reward > b.reward;
  };
  for (const auto& c : seed.candidates)
    if (c.task == task && (!best || better(c, *best))) best = &c;
  return best;
}

void step_tables(const std::vector<RunRecord>& runs, Report& r) {
  Table steps{"steps", "Per step: reward, correctness and fast_p (mean over seeds; low and high: the seeds' extremes)",
              "", {"run", "step", "seeds", "samples", "reward_mean", "reward_mean_low", "reward_mean_high", "correct"},
              {}};
  for (double p : {0.0, 1.0, 1.2}) steps.columns.push_back(fast_name(p));
  Table statuses{"status", "Verdicts per step (all seeds)", "", {"run", "step"}, {}};
  for (auto s : kStatuses) statuses.columns.emplace_back(eval::status_name(s));
  Chart reward{"reward", "Reward per step (mean, band: min to max over seeds)", {}};
  Chart correct{"correct", "Correct share per step", {}};
  Chart fast1{"fast_1", "fast_1 per step (correct and faster than the reference)", {}};
  for (const auto& run : runs) {
    Series rs{label_of(run), {}, {}}, cs = rs, fs = rs;
    for (const auto& [step, seeds] : by_step(run)) {
      std::vector<double> reward_means, corrects;
      std::vector<std::vector<double>> fasts(3);
      std::size_t samples = 0;
      std::map<eval::Status, int> counts;
      for (const auto& [seed, cands] : seeds) {
        double reward = 0, ok = 0;
        std::vector<double> f(3, 0.0);
        for (const auto* c : cands) {
          reward += c->reward;
          ok += c->status == eval::Status::correct;
          const double ps[] = {0.0, 1.0, 1.2};
          for (int k = 0; k < 3; ++k) f[k] += fast(*c, ps[k]);
          ++counts[c->status];
        }
        const double n = static_cast<double>(cands.size());
        samples += cands.size();
        reward_means.push_back(reward / n);
        corrects.push_back(ok / n);
        for (int k = 0; k < 3; ++k) fasts[k].push_back(f[k] / n);
      }
      const Band rb = band(reward_means);
      std::vector<Cell> row{label_of(run), double(step), double(seeds.size()), double(samples), rb.mean, rb.low, rb.high,
                            band(corrects).mean};
      for (const auto& f : fasts) row.push_back(band(f).mean);
      steps.rows.push_back(std::move(row));
      std::vector<Cell> srow{label_of(run), double(step)};
      for (auto s : kStatuses) srow.push_back(double(counts[s]));
      statuses.rows.push_back(std::move(srow));
      for (auto* series : {&rs, &cs, &fs}) series->steps.push_back(step);
      rs.points.push_back(rb);
      cs.points.push_back(band(corrects));
      fs.points.push_back(band(fasts[1]));
    }
    reward.series.push_back(std::move(rs));
    correct.series.push_back(std::move(cs));
    fast1.series.push_back(std::move(fs));
  }
  r.tables.push_back(std::move(steps));
  r.tables.push_back(std::move(statuses));
  r.charts = {std::move(reward), std::move(correct), std::move(fast1)};
}

void best_table(const std::vector<RunRecord>& runs, Report& r) {
  Table t{"best", "The best kernel per task (the fastest correct one over all seeds)", "",
          {"run", "task", "seed", "candidate", "status", "speedup", "reward"}, {}};
  for (const auto& run : runs)
    for (const auto& task : run.tasks) {
      const CandidateRow* best = nullptr;
      const SeedRun* where = nullptr;
      for (const auto& s : run.seeds) {
        const auto* b = best_of(s, task);
        if (!b) continue;
        const bool bc = b->status == eval::Status::correct;
        const bool cur = best && best->status == eval::Status::correct;
        if (!best || (bc && !cur) || (bc == cur && (bc ? b->speedup.value_or(0) > best->speedup.value_or(0)
                                                        : b->reward > best->reward))) {
          best = b;
          where = &s;
        }
      }
      if (!best) continue;
      BestKernel k{label_of(run), task, where->seed, *best, "", where->dir / "candidates.jsonl"};
      if (!best->source_file.empty()) {
        try {
          k.source = run::read_recorded_source(where->dir, best->source_file);
        } catch (const run::RecordedFileError& e) {
          r.warnings.push_back(label_of(run) + ": the source of candidate " + std::to_string(best->id) +
                               " is not shown: " + e.what());
        }
      }
      t.rows.push_back({label_of(run), task, double(where->seed), double(best->id),
                        std::string(eval::status_name(best->status)),
                        best->speedup ? Cell(*best->speedup) : Cell(), best->reward});
      r.best.push_back(std::move(k));
    }
  r.tables.push_back(std::move(t));
}

struct Budget {
  double samples = 0, tokens = 0, compile_seconds = 0, evaluation_seconds = 0;
};

Budget budget_of(const RunRecord& run) {
  Budget b;
  for (const auto& s : run.seeds)
    for (const auto& c : s.candidates) {
      b.samples += 1;
      b.tokens += c.tokens;
      b.compile_seconds += c.compile_seconds;
      b.evaluation_seconds += c.evaluation_seconds;
    }
  return b;
}

void budget_tables(const std::vector<RunRecord>& runs, Report& r) {
  Table budget{"budget", "Budget (all seeds)", "samples_per_task: per task and seed",
               {"run", "mode", "seeds", "tasks", "samples", "samples_per_task", "tokens", "compile_seconds",
                "evaluation_seconds"},
               {}};
  Table nodes{"nodes", "Per evaluating node (all seeds)", "candidates_per_second: over the span of its evaluations",
              {"run", "node", "candidates", "evaluation_seconds", "candidates_per_second"}, {}};
  Table losses{"losses", "Training loss per step (mean over seeds and adapters)", "", {"run", "step", "loss"}, {}};
  for (const auto& run : runs) {
    const Budget b = budget_of(run);
    const double per_task = run.tasks.empty() || run.seeds.empty() ? 0 : b.samples / (run.tasks.size() * run.seeds.size());
    budget.rows.push_back({label_of(run), experiment::run_mode_name(run.experiment.mode), double(run.seeds.size()),
                           double(run.tasks.size()), b.samples, per_task, b.tokens, b.compile_seconds,
                           b.evaluation_seconds});
    struct NodeSum {
      double candidates = 0, seconds = 0, first = 1e300, last = 0;
    };
    std::map<std::string, NodeSum> per_node;
    std::map<int, std::vector<double>> loss;
    for (const auto& s : run.seeds) {
      for (const auto& c : s.candidates) {
        if (!c.evaluate) continue;
        auto& n = per_node[c.node.empty() ? "local" : c.node];
        n.candidates += 1;
        n.seconds += c.evaluation_seconds;
        n.first = std::min(n.first, c.evaluate->start);
        n.last = std::max(n.last, c.evaluate->end);
      }
      for (const auto& u : s.units)
        if (u.loss) loss[u.step].push_back(*u.loss);
    }
    for (const auto& [node, n] : per_node)
      nodes.rows.push_back({label_of(run), node, n.candidates, n.seconds,
                            n.last > n.first ? Cell(n.candidates / (n.last - n.first)) : Cell()});
    for (const auto& [step, values] : loss) losses.rows.push_back({label_of(run), double(step), band(values).mean});
  }
  r.tables.push_back(std::move(budget));
  r.tables.push_back(std::move(nodes));
  if (!losses.rows.empty()) r.tables.push_back(std::move(losses));
}

void timelines(const std::vector<RunRecord>& runs, Report& r) {
  for (const auto& run : runs) {
    if (run.seeds.empty()) continue;
    const auto& s = run.seeds.front();
    Timeline t{label_of(run), s.seed, {"generate", "compile"}, {}, 0, 0};
    std::vector<const CandidateRow*> cands;
    for (const auto& c : s.candidates) cands.push_back(&c);
    std::sort(cands.begin(), cands.end(), [](auto* a, auto* b) {
      return (a->generate ? a->generate->start : 0) < (b->generate ? b->generate->start : 0);
    });
    if (cands.size() > kMaxTimelineCandidates) {
      t.candidates_left_out = cands.size() - kMaxTimelineCandidates;
      cands.resize(kMaxTimelineCandidates);
    }
    double t0 = 1e300, t1 = 0;
    auto extend = [&](const std::optional<Span>& sp) {
      if (sp) t0 = std::min(t0, sp->start), t1 = std::max(t1, sp->end);
    };
    for (const auto* c : cands) extend(c->generate), extend(c->compile), extend(c->evaluate);
    for (const auto& u : s.units) extend(u.train);
    if (t1 <= t0) continue;
    std::map<std::string, std::size_t> lane_of;
    auto lane = [&](const std::string& name) {
      auto it = lane_of.find(name);
      if (it != lane_of.end()) return it->second;
      t.lanes.push_back(name);
      return lane_of[name] = t.lanes.size() - 1;
    };
    lane_of["generate"] = 0;
    lane_of["compile"] = 1;
    auto add = [&](std::size_t l, Stage stage, const std::optional<Span>& sp) {
      if (sp && sp->end >= sp->start) t.bars.push_back({l, stage, sp->start - t0, sp->end - t0});
    };
    for (const auto* c : cands) {
      add(0, Stage::generate, c->generate);
      add(1, Stage::compile, c->compile);
      add(lane("evaluate " + (c->node.empty() ? std::string("local") : c->node) + " " + c->device), Stage::evaluate,
          c->evaluate);
    }
    for (const auto& u : s.units) add(lane("train"), Stage::train, u.train);
    t.seconds = t1 - t0;
    r.timelines.push_back(std::move(t));
  }
}

// Two or more runs: fast_p over (seed, task) pairs with bootstrap intervals, per-task speedups, difficulty strata,
// and a warning where the budgets differ.
void comparison(const std::vector<RunRecord>& runs, Report& r) {
  if (runs.size() < 2) return;
  Table fastp{"fast_p", "fast_p of the best kernel per task and seed, with bootstrap 95% confidence intervals",
              "n: (seed, task) pairs; the interval resamples them", {"run", "p", "fast_p", "ci_low", "ci_high", "n"}, {}};
  std::set<std::string> tasks;
  for (const auto& run : runs) tasks.insert(run.tasks.begin(), run.tasks.end());
  // run -> task -> per seed: the best correct speedup (0 when none is correct)
  std::vector<std::map<std::string, std::vector<double>>> best(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (const auto& task : runs[i].tasks)
      for (const auto& s : runs[i].seeds) {
        const auto* b = best_of(s, task);
        // 0: nothing correct; a correct kernel without a measured speedup passes fast_0 only.
        best[i][task].push_back(b && b->status == eval::Status::correct ? b->speedup.value_or(1e-9) : 0.0);
      }
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (double p : kFastThresholds) {
      std::vector<double> hits;
      for (const auto& [task, speedups] : best[i])
        for (double s : speedups) hits.push_back(s > p ? 1.0 : 0.0);
      const auto ci = bootstrap_mean(hits);
      fastp.rows.push_back({label_of(runs[i]), p, ci.mean, ci.low, ci.high, double(ci.n)});
    }
  Table per_task{"per_task", "Best speedup per task (geometric mean over seeds of the best correct kernel's)",
                 "empty: no correct kernel in some seed", {"task"}, {}};
  for (const auto& run : runs) per_task.columns.push_back(label_of(run));
  auto geomean = [](const std::vector<double>& v) -> std::optional<double> {
    if (v.empty()) return std::nullopt;
    double log_sum = 0;
    for (double x : v) {
      if (x <= 1e-6) return std::nullopt;  // no correct kernel, or one without a measured speedup
      log_sum += std::log(x);
    }
    return std::exp(log_sum / v.size());
  };
  Scatter scatter{label_of(runs[0]), label_of(runs[1]), {}};
  for (const auto& task : tasks) {
    std::vector<Cell> row{task};
    std::vector<std::optional<double>> g;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      auto it = best[i].find(task);
      g.push_back(it == best[i].end() ? std::nullopt : geomean(it->second));
      row.push_back(g.back() ? Cell(*g.back()) : Cell());
    }
    per_task.rows.push_back(std::move(row));
    if (g[0] && g[1]) scatter.points.push_back({task, *g[0], *g[1]});
  }
  // Difficulty: the first run is the base; a task's stratum is the base's fast_1 on it over its seeds.
  Table strata{"difficulty", "fast_1 by difficulty (the first run's fast_1 per task: hard 0, medium between, easy 1)",
               "", {"stratum", "tasks"}, {}};
  for (const auto& run : runs) strata.columns.push_back(label_of(run));
  std::map<std::string, std::vector<std::string>> members;
  for (const auto& task : tasks) {
    auto it = best[0].find(task);
    if (it == best[0].end()) continue;
    double hits = 0;
    for (double s : it->second) hits += s > 1.0;
    const double share = hits / it->second.size();
    members[share == 0 ? "hard" : share == 1 ? "easy" : "medium"].push_back(task);
  }
  for (const char* stratum : {"hard", "medium", "easy"}) {
    const auto& ts = members[stratum];
    if (ts.empty()) continue;
    std::vector<Cell> row{std::string(stratum), double(ts.size())};
    for (std::size_t i = 0; i < runs.size(); ++i) {
      std::vector<double> hits;
      for (const auto& task : ts)
        if (auto it = best[i].find(task); it != best[i].end())
          for (double s : it->second) hits.push_back(s > 1.0);
      row.push_back(hits.empty() ? Cell() : Cell(band(hits).mean));
    }
    strata.rows.push_back(std::move(row));
  }
  r.tables.push_back(std::move(fastp));
  r.tables.push_back(std::move(per_task));
  r.tables.push_back(std::move(strata));
  r.scatter = std::move(scatter);
  // Equal budgets: samples per task and seed within 5% of the first run's.
  const auto base = budget_of(runs[0]);
  const double base_per_task = base.samples / std::max<std::size_t>(1, runs[0].tasks.size() * runs[0].seeds.size());
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const auto b = budget_of(runs[i]);
    const double per_task = b.samples / std::max<std::size_t>(1, runs[i].tasks.size() * runs[i].seeds.size());
    if (std::abs(per_task - base_per_task) > 0.05 * std::max(per_task, base_per_task)) {
      std::ostringstream w;
      w << "budgets differ: " << label_of(runs[i]) << " spent " << per_task << " samples per task and seed, "
        << label_of(runs[0]) << " " << base_per_task << "; the comparison is not at equal budget";
      r.warnings.push_back(w.str());
    }
  }
}

// What the reader left out of a run, so that a report never looks complete when it is not.
void reading_warnings(const RunRecord& run, Report& r) {
  constexpr std::size_t kListed = 10;
  if (!run.skipped.empty()) {
    std::ostringstream w;
    w << label_of(run) << ": " << run.skipped.size() << " record line" << (run.skipped.size() == 1 ? "" : "s")
      << " left out:";
    for (std::size_t i = 0; i < std::min(kListed, run.skipped.size()); ++i) {
      const auto& s = run.skipped[i];
      w << (i ? ";" : "") << " " << s.file.lexically_relative(run.dir).string() << " line " << s.line << " (" << s.why
        << ")";
    }
    if (run.skipped.size() > kListed) w << "; and " << run.skipped.size() - kListed << " more";
    r.warnings.push_back(w.str());
  }
  if (run.repaired_lines)
    r.warnings.push_back(label_of(run) + ": " + std::to_string(run.repaired_lines) +
                         " record line(s) held a lone UTF-16 surrogate escape, read with U+FFFD in its place");
}

// Runs compared on no common task compare nothing; say so rather than show side-by-side numbers.
void shared_task_warnings(const std::vector<RunRecord>& runs, Report& r) {
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const auto& a = runs[0].tasks;
    const auto& b = runs[i].tasks;
    std::vector<std::string> common;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
    if (common.empty())
      r.warnings.push_back(label_of(runs[i]) + " and " + label_of(runs[0]) +
                           " share no task: their numbers are not comparable");
  }
}

}  // namespace

Report build_report(const std::vector<RunRecord>& runs) {
  Report r;
  for (const auto& run : runs) {
    r.runs.push_back(label_of(run));
    bool unfinished = false;
    for (const auto& s : run.seeds) unfinished = unfinished || !s.finished;
    if (unfinished) r.warnings.push_back(label_of(run) + " has not finished: its numbers are those recorded so far");
    reading_warnings(run, r);
  }
  shared_task_warnings(runs, r);
  step_tables(runs, r);
  best_table(runs, r);
  budget_tables(runs, r);
  comparison(runs, r);
  timelines(runs, r);
  return r;
}

}  // namespace crucible::report

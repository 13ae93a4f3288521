// `crucible sft-data RUN_DIR --out pairs.jsonl`: the best correct kernels a run found, as supervised pairs for
// `crucible sft --chat`: the prompt is the task's kernel prompt exactly as a libtorch policy sees it, the completion
// the kernel in the code block the prompt asks for. This is the warm start before reinforcement learning.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli/commands.h"
#include "config/text_file.h"
#include "crucible/eval/evaluator.h"
#include "experiment/experiment.h"
#include "policy/kernel_prompt.h"
#include "report/recorded_experiment.h"
#include "run/jsonl.h"
#include "run/recorded_file.h"
#include "run/task_record.h"
#include "tasks/task_loader.h"

namespace crucible::cli {
namespace {
namespace fs = std::filesystem;

struct SftDataArgs {
  std::string run, out;
  int top = 4;
  double min_speedup = 1.0;  // kernels slower than the reference teach the model to write slow kernels
};

struct Kernel {
  double speedup = 0;
  std::string source;
};

// The tasks as the run saw them: its own task record, else (a run from before the record) the experiment's tasks.
std::map<std::string, eval::TaskSpec> run_tasks(const fs::path& run, const experiment::Experiment& e) {
  std::map<std::string, eval::TaskSpec> tasks;
  if (auto record = run::read_task_record(run)) {
    for (const auto& t : *record)
      if (!t.text.empty()) tasks[t.name] = tasks::parse_task_text(t.text, (run / "task_record.json").string() + ": " + t.name);
    return tasks;
  }
  for (auto& t : experiment::resolve_tasks(e)) tasks[t.name] = std::move(t);
  return tasks;
}

std::string text_at(const nlohmann::json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The best correct kernels per task over every seed, each source once. A source the run directory may not hand
// out (a link, a FIFO, a file outside it) is left out and said on stderr.
std::map<std::string, std::vector<Kernel>> correct_kernels(const fs::path& run, const SftDataArgs& a,
                                                           const std::map<std::string, eval::TaskSpec>& tasks) {
  std::map<std::string, std::vector<Kernel>> found;
  std::set<std::string> seen;
  for (const auto& seed : fs::directory_iterator(run)) {
    if (!seed.is_directory() || seed.path().filename().string().rfind("seed-", 0) != 0) continue;
    for (const auto& c : run::read_jsonl_lines(seed.path() / "candidates.jsonl").values) {
      if (!c.is_object() || text_at(c, "status") != "correct" || text_at(c, "source_file").empty()) continue;
      const double speedup = c.contains("speedup") && c["speedup"].is_number() ? c["speedup"].get<double>() : 0.0;
      const std::string file = text_at(c, "source_file"), task = text_at(c, "task");
      if (speedup < a.min_speedup || !tasks.count(task) || !seen.insert(file).second) continue;
      try {
        std::string source = run::read_recorded_source(seed.path(), file);  // read first: a refused one adds no task
        found[task].push_back({speedup, std::move(source)});
      } catch (const run::RecordedFileError& e) {
        std::cerr << "skipped: " << e.what() << "\n";
      }
    }
  }
  return found;
}

int sft_data(const SftDataArgs& a) {
  try {
    const fs::path run(a.run);
    const auto e = report::read_recorded_experiment(run);
    const eval::CandidateLanguage language{e.eval.backend, e.eval.kind};
    const auto tasks = run_tasks(run, e);
    auto found = correct_kernels(run, a, tasks);
    const std::string contract = config::read_text_file(eval::default_include_dir() / "crucible" / "kernel.h");
    const std::string fence = "```" + policy::code_fence_tag(language) + "\n";
    std::ofstream out(a.out);
    if (!out) throw std::invalid_argument("cannot write " + a.out);
    std::size_t pairs = 0;
    for (auto& [task, kernels] : found) {
      if (kernels.empty()) continue;
      std::sort(kernels.begin(), kernels.end(), [](const Kernel& x, const Kernel& y) { return x.speedup > y.speedup; });
      kernels.resize(std::min<std::size_t>(kernels.size(), static_cast<std::size_t>(a.top)));
      const std::string prompt = policy::kernel_prompt(tasks.at(task), language, contract);
      for (const auto& k : kernels) {
        std::string code = k.source;
        if (!code.empty() && code.back() != '\n') code += '\n';
        out << nlohmann::json{{"prompt", prompt}, {"completion", fence + code + "```"}, {"task", task},
                              {"speedup", k.speedup}}
                   .dump()
            << "\n";
        ++pairs;
      }
      std::cout << task << ": " << kernels.size() << " kernels, best speedup " << kernels.front().speedup << "\n";
    }
    if (pairs == 0) {
      std::cerr << "no correct kernels in " << a.run << (a.min_speedup > 0 ? " at that speedup" : "") << "\n";
      return 1;
    }
    std::cout << pairs << " pairs written to " << a.out << " (train with: crucible sft --chat --data " << a.out
              << " ...)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

Run add_sft_data_command(CLI::App& app) {
  auto args = std::make_shared<SftDataArgs>();
  auto* cmd = app.add_subcommand("sft-data", "A run's best correct kernels as prompt/completion JSONL for `crucible sft --chat`");
  cmd->add_option("run", args->run, "Run directory")->required();
  cmd->add_option("--out", args->out, "JSONL file to write")->required();
  cmd->add_option("--top", args->top, "Kernels per task, fastest first")->capture_default_str();
  cmd->add_option("--min-speedup", args->min_speedup, "Only kernels at least this fast")->capture_default_str();
  return [cmd, args]() -> int { return cmd->parsed() ? sft_data(*args) : -1; };
}

}  // namespace crucible::cli

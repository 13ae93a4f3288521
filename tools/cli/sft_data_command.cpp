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
#include "run/jsonl.h"

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

int sft_data(const SftDataArgs& a) {
  try {
    const fs::path run(a.run);
    const auto e = experiment::load_experiment(run / "experiment.toml");
    const eval::Backend backend = e.eval.backend;
    std::map<std::string, eval::TaskSpec> tasks;
    for (auto& t : experiment::resolve_tasks(e)) tasks[t.name] = std::move(t);
    // The best correct kernels per task over every seed, each source once.
    std::map<std::string, std::vector<Kernel>> found;
    std::set<std::string> seen;
    for (const auto& seed : fs::directory_iterator(run)) {
      if (!seed.is_directory() || seed.path().filename().string().rfind("seed-", 0) != 0) continue;
      if (!fs::exists(seed.path() / "candidates.jsonl")) continue;
      for (const auto& c : run::read_jsonl(seed.path() / "candidates.jsonl", /*skip_malformed=*/true)) {
        if (c.value("status", "") != "correct" || !c.contains("source_file") || !c["source_file"].is_string()) continue;
        const double speedup = c.contains("speedup") && c["speedup"].is_number() ? c["speedup"].get<double>() : 0.0;
        const std::string file = c["source_file"].get<std::string>();
        if (speedup < a.min_speedup || !tasks.count(c.value("task", "")) || !seen.insert(file).second) continue;
        found[c["task"].get<std::string>()].push_back({speedup, config::read_text_file(seed.path() / file)});
      }
    }
    const std::string contract = config::read_text_file(eval::default_include_dir() / "crucible" / "kernel.h");
    const std::string fence = backend == eval::Backend::cuda ? "```cuda\n" : "```cpp\n";
    std::ofstream out(a.out);
    if (!out) throw std::invalid_argument("cannot write " + a.out);
    std::size_t pairs = 0;
    for (auto& [task, kernels] : found) {
      std::sort(kernels.begin(), kernels.end(), [](const Kernel& x, const Kernel& y) { return x.speedup > y.speedup; });
      kernels.resize(std::min<std::size_t>(kernels.size(), static_cast<std::size_t>(a.top)));
      const std::string prompt = policy::kernel_prompt(tasks.at(task), std::string(eval::backend_name(backend)), contract);
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

#include "tasks/kernelbench_import.h"

#include <nlohmann/json.hpp>

#include <sstream>
#include <stdexcept>

#include "config/toml_reader.h"
#include "crucible/eval/subprocess.h"
#include "tasks/task_loader.h"

namespace crucible::tasks {
namespace fs = std::filesystem;
using nlohmann::json;

fs::path default_kernelbench_importer() { return fs::path(CRUCIBLE_SOURCE_DIR) / "tools/kernelbench/import_kernelbench.py"; }

namespace {

// The report is the last line of the program's output that parses as the report object; diagnostics come before.
json report_of(const std::string& output) {
  std::istringstream lines(output);
  json found;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{", 0) != 0) continue;
    auto j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("imported") && j.contains("refused")) found = std::move(j);
  }
  return found;
}

std::string tail_of(const std::string& text, std::size_t n = 2000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

}  // namespace

ImportReport import_kernelbench(const KernelBenchImport& r) {
  if (r.problems.empty()) throw std::invalid_argument("name at least one KernelBench problem file or directory");
  for (const auto& p : r.problems)
    if (!fs::exists(p)) throw std::invalid_argument("no such KernelBench problem path: " + p.string());
  const fs::path importer = r.importer.empty() ? default_kernelbench_importer() : r.importer;
  if (!fs::is_regular_file(importer)) throw std::invalid_argument("the import program is missing: " + importer.string());
  auto probe = eval::run_process({r.python, "-c", "import torch"}, eval::ProcessLimits{});
  if (!probe.ok())
    throw std::invalid_argument(r.python + " cannot import torch (install Debian's python3-torch, or name an "
                                "interpreter that has PyTorch): " + tail_of(probe.output, 300));
  std::error_code ec;
  fs::create_directories(r.out, ec);
  if (ec) throw std::invalid_argument("cannot create " + r.out.string() + ": " + ec.message());

  std::vector<std::string> argv{r.python, importer.string(), "--out", r.out.string(), "--timeout",
                                std::to_string(r.problem_time_limit_s), "--jobs", std::to_string(r.jobs)};
  if (r.cuda) argv.push_back("--cuda");
  if (!r.levels.empty()) {
    std::string levels;
    for (int l : r.levels) levels += (levels.empty() ? "" : ",") + std::to_string(l);
    argv.insert(argv.end(), {"--levels", levels});
  }
  for (const auto& p : r.problems) argv.push_back(p.string());
  eval::ProcessLimits limits;
  limits.wall_seconds = r.time_limit_s;
  limits.max_output_bytes = 64 << 20;
  const auto run = eval::run_process(argv, limits);
  const json j = report_of(run.output);
  if (!run.ok() || j.is_null())
    throw std::runtime_error("the KernelBench import program failed" +
                             std::string(run.timed_out ? " (time limit)" : "") + ": " + tail_of(run.output));

  ImportReport report;
  report.seconds = run.seconds;
  for (const auto& x : j["refused"]) report.refused.push_back({x.value("problem", ""), x.value("reason", "")});
  // Each written task must load here too: what the loader refuses is a refusal, not an imported task.
  for (const auto& x : j["imported"]) {
    const std::string name = x.get<std::string>();
    try {
      load_task_file(r.out / (name + ".toml"));
      report.imported.push_back(name);
    } catch (const std::exception& e) {
      report.refused.push_back({name, std::string("its task file does not load: ") + e.what()});
    }
  }
  return report;
}

std::string report_json(const ImportReport& report) {
  json refused = json::array();
  for (const auto& x : report.refused) refused.push_back({{"problem", x.problem}, {"reason", x.reason}});
  return json{{"imported", report.imported}, {"refused", refused}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace crucible::tasks

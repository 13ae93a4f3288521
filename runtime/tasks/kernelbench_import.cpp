#include "tasks/kernelbench_import.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "config/toml_reader.h"
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/subprocess.h"
#include "tasks/task_loader.h"

namespace crucible::tasks {
namespace fs = std::filesystem;
using nlohmann::json;

fs::path default_kernelbench_importer() { return fs::path(CRUCIBLE_SOURCE_DIR) / "tools/kernelbench/import_kernelbench.py"; }

namespace {

std::string tail_of(const std::string& text, std::size_t n = 2000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// What the import program said when it refused its arguments (it ran no problem code): its last lines, without
// the "error: " the command line puts in front again.
std::string argument_error(std::string output) {
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  output = tail_of(output);
  if (output.rfind("error: ", 0) == 0) output.erase(0, 7);
  return output;
}

// A private directory for the report file, removed with everything in it however the import ends.
struct ReportDir {
  fs::path path = eval::make_scratch_dir("kb-import");
  ReportDir() = default;
  ReportDir(const ReportDir&) = delete;
  ReportDir& operator=(const ReportDir&) = delete;
  ~ReportDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// The import program's report: {"imported": [names], "refused": [{"problem", "reason"}]}; null when it is not that.
json read_report(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  std::ostringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("imported") || !j["imported"].is_array() || !j.contains("refused") ||
      !j["refused"].is_array())
    return nullptr;
  for (const auto& x : j["imported"])
    if (!x.is_string()) return nullptr;
  for (const auto& x : j["refused"])
    if (!x.is_object() || !x.value("problem", json()).is_string() || !x.value("reason", json()).is_string())
      return nullptr;
  if (j.contains("without_cuda_reference")) {
    if (!j["without_cuda_reference"].is_array()) return nullptr;
    for (const auto& x : j["without_cuda_reference"])
      if (!x.is_object() || !x.value("task", json()).is_string() || !x.value("reason", json()).is_string())
        return nullptr;
  }
  return j;
}

std::vector<std::string> importer_arguments(const KernelBenchImport& r, const fs::path& importer,
                                            const fs::path& report) {
  std::vector<std::string> argv{r.python, importer.string(), "--out", r.out.string(), "--report", report.string(),
                                "--timeout", std::to_string(r.problem_time_limit_s), "--jobs", std::to_string(r.jobs)};
  if (r.cuda) argv.push_back("--cuda");
  if (!r.levels.empty()) {
    std::string levels;
    for (int l : r.levels) levels += (levels.empty() ? "" : ",") + std::to_string(l);
    argv.insert(argv.end(), {"--levels", levels});
  }
  for (const auto& p : r.problems) argv.push_back(p.string());
  return argv;
}

// The report travels in a file of its own, never on the program's output: problem code runs in the import and may
// print anything there, so that output is only the log (ImportReport::output), never parsed.
json run_importer(const KernelBenchImport& r, const fs::path& importer, ImportReport& report) {
  const ReportDir dir;
  const fs::path file = dir.path / "report.json";
  eval::ProcessLimits limits;
  limits.wall_seconds = r.time_limit_s;
  limits.max_output_bytes = 16 << 20;
  const auto run = eval::run_process(importer_arguments(r, importer, file), limits);
  report.output = run.output;
  report.seconds = run.seconds;
  if (!run.timed_out && run.signal == 0 && run.exit_code == 2)  // bad arguments, or no problem file in the paths
    throw std::invalid_argument(argument_error(run.output));
  if (!run.ok())
    throw std::runtime_error("the KernelBench import program failed" +
                             std::string(run.timed_out ? " (time limit)" : "") + ": " + tail_of(run.output));
  json j = read_report(file);
  if (j.is_null())
    throw std::runtime_error("the KernelBench import program wrote no valid report: " + tail_of(run.output));
  return j;
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

  eval::remove_orphaned_scratch_dirs("kb-import");  // left by imports killed outright
  ImportReport report;
  const json j = run_importer(r, importer, report);
  for (const auto& x : j["refused"]) report.refused.push_back({x.value("problem", ""), x.value("reason", "")});
  for (const auto& x : j.value("without_cuda_reference", json::array()))
    report.without_cuda_reference.push_back({x.value("task", ""), x.value("reason", "")});
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
  json j{{"imported", report.imported}, {"refused", refused}};
  if (!report.without_cuda_reference.empty()) {
    json missing = json::array();
    for (const auto& x : report.without_cuda_reference) missing.push_back({{"task", x.problem}, {"reason", x.reason}});
    j["without_cuda_reference"] = missing;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace crucible::tasks

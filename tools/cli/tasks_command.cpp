#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/toml_reader.h"
#include "crucible/eval/reference_check.h"
#include "tasks/kernelbench_import.h"
#include "tasks/task_loader.h"

namespace crucible::cli {
namespace {

struct TasksArgs {
  std::string tasks_dir;
  std::string name;
  // import
  std::vector<std::string> kernelbench;
  std::string out;
  std::vector<int> levels;
  double problem_timeout_s = 180.0;
  int jobs = 1;
  bool cuda = false;
  // check
  std::string device = "cpu";
  std::vector<std::string> names;
  bool json = false;
};

std::filesystem::path dir_of(const TasksArgs& a) {
  return a.tasks_dir.empty() ? tasks::default_tasks_dir() : std::filesystem::path(a.tasks_dir);
}

int list_tasks(const TasksArgs& a) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_of(a), ec)) {
    std::cerr << "error: the tasks directory " << dir_of(a).string() << " does not exist\n";
    return 2;
  }
  int errors = 0;
  std::printf("%-16s %-5s %-14s %s\n", "NAME", "LEVEL", "FAMILY", "INPUTS -> OUTPUTS");
  for (const auto& file : tasks::task_files(dir_of(a))) {
    try {
      auto t = tasks::load_task_file(file);
      std::string io;
      for (const auto& x : t.inputs) io += (io.empty() ? "" : ", ") + x.name;
      io += " -> ";
      for (std::size_t i = 0; i < t.outputs.size(); ++i) io += (i ? ", " : "") + t.outputs[i].name;
      std::printf("%-16s %-5d %-14s %s\n", t.name.c_str(), t.level, t.family.c_str(), io.c_str());
    } catch (const config::ConfigError& e) {
      std::cerr << "config error: " << e.what() << "\n";
      ++errors;
    }
  }
  return errors ? 2 : 0;
}

int show_task(const TasksArgs& a) {
  try {
    std::cout << tasks::describe_task(tasks::find_task(a.name, dir_of(a)));
    return 0;
  } catch (const config::ConfigError& e) {
    std::cerr << "config error: " << e.what() << "\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 2;
}

// Every task's reference run alone on the device at its sizes: exit 1 when one fails, 0 when each runs or is too
// large for the device (a classified skip: the evaluator refuses it there with the same reason).
int check_tasks(const TasksArgs& a) {
  eval::Device device;
  try {
    device = eval::parse_device(a.device);
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::vector<std::filesystem::path> files;
  if (a.names.empty()) files = tasks::task_files(dir_of(a));
  for (const auto& name : a.names) files.push_back(dir_of(a) / (name + ".toml"));
  nlohmann::json rows = nlohmann::json::array();
  int failed = 0;
  if (!a.json)
    std::printf("%-12s %-9s %9s %9s %9s  %s\n", "TASK", "STATUS", "LOAD_MS", "RUN_MS", "NEED_MIB", "DETAIL");
  for (const auto& file : files) {
    eval::ReferenceCheck check;
    std::string name = file.stem().string();
    try {
      auto task = tasks::load_task_file(file);
      name = task.name;
      check = eval::check_reference(task, device);
    } catch (const config::ConfigError& e) {
      check.detail = e.what();
    }
    failed += check.status == eval::ReferenceStatus::failed;
    const std::string status(eval::reference_status_name(check.status));
    if (a.json) {
      rows.push_back({{"task", name}, {"status", status}, {"load_ms", check.load_ms}, {"run_ms", check.run_ms},
                      {"bytes_needed", check.bytes_needed}, {"bytes_free", check.bytes_free}, {"detail", check.detail}});
    } else {
      std::printf("%-12s %-9s %9.1f %9.3f %9.0f  %s\n", name.c_str(), status.c_str(), check.load_ms, check.run_ms,
                  check.bytes_needed / (1 << 20), check.detail.c_str());
      std::fflush(stdout);
    }
  }
  if (a.json) std::cout << rows.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return failed ? 1 : 0;
}

int import_tasks(const TasksArgs& a) {
  tasks::KernelBenchImport request;
  for (const auto& p : a.kernelbench) request.problems.emplace_back(p);
  request.out = a.out;
  request.levels = a.levels;
  request.problem_time_limit_s = a.problem_timeout_s;
  request.jobs = a.jobs;
  request.cuda = a.cuda;
  if (const char* python = std::getenv("CRUCIBLE_PYTHON")) request.python = python;
  tasks::ImportReport report;
  try {
    report = tasks::import_kernelbench(request);
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "import failed: " << e.what() << "\n";
    return 1;
  }
  // The import program's log (progress, and whatever the problems printed) is for the reader, never the report.
  std::cerr << report.output << (report.output.empty() || report.output.back() == '\n' ? "" : "\n");
  if (a.json) {
    std::cout << tasks::report_json(report) << "\n";
    return 0;
  }
  std::printf("imported %zu task(s) into %s in %.0f s; refused %zu\n", report.imported.size(), a.out.c_str(),
              report.seconds, report.refused.size());
  for (const auto& r : report.refused) std::printf("  refused %s: %s\n", r.problem.c_str(), r.reason.c_str());
  for (const auto& r : report.without_cuda_reference)
    std::printf("  %s has no CUDA reference (CPU sizes only): %s\n", r.problem.c_str(), r.reason.c_str());
  return 0;
}

}  // namespace

Run add_tasks_command(CLI::App& app) {
  auto args = std::make_shared<TasksArgs>();
  auto* cmd = app.add_subcommand("tasks", "List and inspect tasks");
  cmd->add_option("--tasks-dir", args->tasks_dir, "Directory of task .toml files");
  cmd->require_subcommand(1);
  auto* list = cmd->add_subcommand("list", "List every task");
  auto* show = cmd->add_subcommand("show", "Print one task's spec");
  show->add_option("name", args->name, "Task name or path")->required();
  auto* import = cmd->add_subcommand("import", "Import KernelBench problems as tasks (TorchScript references)");
  import->add_option("--kernelbench", args->kernelbench, "KernelBench problem files or directories (level1/, ...)")
      ->required();
  import->add_option("--out", args->out, "Directory for the tasks (use it as --tasks-dir or [tasks] dir)")->required();
  import->add_option("--levels", args->levels, "Only these levels, e.g. 1,2")->delimiter(',');
  import->add_option("--problem-timeout", args->problem_timeout_s, "Seconds one problem may take before it is refused")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));  // bounds a user can read (PositiveNumber's error prints DBL_MAX in full)
  import->add_option("--jobs", args->jobs, "Problems imported at once")->capture_default_str()->check(CLI::Range(1, 256));
  import->add_flag("--cuda", args->cuda,
                   "Also trace each problem at its written sizes on this machine's GPU with its PyTorch (GPU nodes)");
  import->add_flag("--json", args->json, "Print {\"imported\": [...], \"refused\": [...]} instead of a summary");
  auto* check = cmd->add_subcommand("check", "Run each task's reference alone on a device at its sizes");
  check->add_option("names", args->names, "Tasks to check (default: every task in the directory)");
  check->add_option("--device", args->device, "cpu or cuda:N")->capture_default_str();
  check->add_flag("--json", args->json, "Print one JSON array of {task, status, load_ms, run_ms, ...}");
  return [list, show, import, check, args]() -> int {
    if (check->parsed()) return check_tasks(*args);
    if (list->parsed()) return list_tasks(*args);
    if (show->parsed()) return show_task(*args);
    if (import->parsed()) return import_tasks(*args);
    return -1;
  };
}

}  // namespace crucible::cli

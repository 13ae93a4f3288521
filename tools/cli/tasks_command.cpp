#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/toml_reader.h"
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
  bool json = false;
};

std::filesystem::path dir_of(const TasksArgs& a) {
  return a.tasks_dir.empty() ? tasks::default_tasks_dir() : std::filesystem::path(a.tasks_dir);
}

int list_tasks(const TasksArgs& a) {
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

int import_tasks(const TasksArgs& a) {
  tasks::KernelBenchImport request;
  for (const auto& p : a.kernelbench) request.problems.emplace_back(p);
  request.out = a.out;
  request.levels = a.levels;
  request.problem_time_limit_s = a.problem_timeout_s;
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
  if (a.json) {
    std::cout << tasks::report_json(report) << "\n";
    return 0;
  }
  std::printf("imported %zu task(s) into %s in %.0f s; refused %zu\n", report.imported.size(), a.out.c_str(),
              report.seconds, report.refused.size());
  for (const auto& r : report.refused) std::printf("  refused %s: %s\n", r.problem.c_str(), r.reason.c_str());
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
      ->check(CLI::PositiveNumber);
  import->add_flag("--json", args->json, "Print {\"imported\": [...], \"refused\": [...]} instead of a summary");
  return [list, show, import, args]() -> int {
    if (list->parsed()) return list_tasks(*args);
    if (show->parsed()) return show_task(*args);
    if (import->parsed()) return import_tasks(*args);
    return -1;
  };
}

}  // namespace crucible::cli

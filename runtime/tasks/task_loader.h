#pragma once
// Tasks live as TOML files under configs/tasks/; this turns them into TaskSpec values.
#include <filesystem>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"

namespace crucible::tasks {

// Throws config::ConfigError naming file, line and key for anything malformed.
eval::TaskSpec load_task_file(const std::filesystem::path& path);
// The same from a task file's text (what the coordinator sends an evaluator node); `source` names it in errors.
eval::TaskSpec parse_task_text(const std::string& text, const std::string& source);

// configs/tasks of this checkout, or $CRUCIBLE_TASKS_DIR.
std::filesystem::path default_tasks_dir();

// Every *.toml under dir, sorted by name.
std::vector<std::filesystem::path> task_files(const std::filesystem::path& dir);

// A path to a .toml file, or a task name looked up in dir. Throws std::invalid_argument if absent.
eval::TaskSpec find_task(const std::string& name_or_path, const std::filesystem::path& dir);

// The spec in human-readable form (what `crucible tasks show` prints).
std::string describe_task(const eval::TaskSpec& task);

}  // namespace crucible::tasks

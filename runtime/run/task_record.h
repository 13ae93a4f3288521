#pragma once
// DIR/task_record.json: the tasks a run started with (names, levels, sizes and each task file's text), written when
// the run starts, so that readers of the run (report, runs, sft-data) do not need the tasks directory again: a run
// copied to another machine, or one whose tasks moved or changed since, still renders.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"

namespace crucible::run {

struct RecordedTask {
  std::string name;
  int level = 1;
  std::map<std::string, std::map<std::string, int64_t>> sizes;  // size set -> symbol -> value
  std::string text;  // the task file as it was; parse with tasks::parse_task_text
};

// Replaces DIR/task_record.json durably. Each task's text is read from its source_path; RunError when it cannot be.
void write_task_record(const std::filesystem::path& run_dir, const std::vector<eval::TaskSpec>& tasks);

// None when the run has no record (it started before runs kept one); RunError when the record is unreadable or
// malformed.
std::optional<std::vector<RecordedTask>> read_task_record(const std::filesystem::path& run_dir);

}  // namespace crucible::run

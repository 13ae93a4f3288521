#include "run/task_record.h"

#include <nlohmann/json.hpp>

#include "run/durable_file.h"
#include "run/recorded_file.h"

namespace crucible::run {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTaskRecord = "task_record.json";
constexpr std::size_t kMaxTaskRecordBytes = std::size_t{64} << 20;

RecordedTask task_of(const json& j) {
  RecordedTask t;
  t.name = j.at("name").get<std::string>();
  t.level = j.at("level").get<int>();
  t.sizes = j.at("sizes").get<std::map<std::string, std::map<std::string, int64_t>>>();
  t.text = j.at("text").get<std::string>();
  return t;
}

}  // namespace

void write_task_record(const fs::path& run_dir, const std::vector<eval::TaskSpec>& tasks) {
  json list = json::array();
  for (const auto& t : tasks) {
    std::string text;
    try {
      text = read_whole_file(t.source_path);
    } catch (const RunError&) {
      text.clear();  // a built-in task without a file: its name, level and sizes are still worth keeping
    }
    list.push_back({{"name", t.name}, {"level", t.level}, {"sizes", t.sizes}, {"text", text}});
  }
  replace_file(run_dir / kTaskRecord,
               json{{"tasks", list}}.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
}

std::optional<std::vector<RecordedTask>> read_task_record(const fs::path& run_dir) {
  const fs::path path = run_dir / kTaskRecord;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  try {
    const json j = json::parse(read_regular_file(path, kMaxTaskRecordBytes, /*follow_link=*/false));
    std::vector<RecordedTask> out;
    for (const auto& t : j.at("tasks")) out.push_back(task_of(t));
    return out;
  } catch (const RecordedFileError& e) {
    throw RunError(e.what());
  } catch (const json::exception&) {
    throw RunError(path.string() + " is not a task record (tasks: [{name, level, sizes, text}])");
  }
}

}  // namespace crucible::run

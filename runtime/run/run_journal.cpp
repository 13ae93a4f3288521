#include "run/run_journal.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <unordered_set>

#include "run/run_error.h"

namespace crucible::run {
namespace {

std::optional<CommitRecord> parse_commit(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("event", "") != "commit") return std::nullopt;
  auto unit = j.find("unit");
  auto index = j.find("index");
  if (unit == j.end() || !unit->is_string() || index == j.end() || !index->is_number_unsigned()) return std::nullopt;
  CommitRecord c;
  c.unit = unit->get<std::string>();
  c.index = index->get<std::size_t>();
  c.has_policy_snapshot = j.value("policy", false);
  return c;
}

}  // namespace

std::string commit_line(const CommitRecord& commit) {
  nlohmann::ordered_json j;
  j["event"] = "commit";
  j["index"] = commit.index;
  j["unit"] = commit.unit;
  j["policy"] = commit.has_policy_snapshot;
  return j.dump() + "\n";
}

Journal parse_journal(const std::string& text) {
  Journal journal;
  std::unordered_set<std::string> units;
  std::size_t bad_line_at = std::string::npos;  // offset of the first line that did not parse
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    bool complete = end != std::string::npos;
    std::size_t next = complete ? end + 1 : text.size();
    std::string line = text.substr(start, (complete ? end : text.size()) - start);
    bool blank = line.find_first_not_of(" \t\r") == std::string::npos;
    if (!blank) {
      auto commit = complete ? parse_commit(line) : std::nullopt;  // a line without its newline is torn
      if (!commit) {
        if (bad_line_at == std::string::npos) bad_line_at = start;
      } else {
        if (bad_line_at != std::string::npos)
          throw RunError("journal is corrupt at byte " + std::to_string(bad_line_at) + ": a bad line before good ones");
        if (commit->index != journal.commits.size() + 1)
          throw RunError("journal is corrupt: commit of '" + commit->unit + "' has index " +
                         std::to_string(commit->index) + ", expected " + std::to_string(journal.commits.size() + 1));
        if (!units.insert(commit->unit).second)
          throw RunError("journal is corrupt: unit '" + commit->unit + "' is committed twice");
        journal.commits.push_back(std::move(*commit));
        journal.valid_bytes = next;
      }
    } else if (bad_line_at == std::string::npos && complete) {
      journal.valid_bytes = next;
    }
    start = next;
  }
  return journal;
}

}  // namespace crucible::run

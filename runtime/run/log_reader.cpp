#include "run/log_reader.h"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace crucible::run {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kTimestampLength = 23;  // 2024-05-01T12:00:00.123

bool is_timestamp(const std::string& s) {
  if (s.size() < kTimestampLength) return false;
  for (std::size_t i = 0; i < kTimestampLength; ++i) {
    char expected = i == 4 || i == 7 ? '-' : i == 10 ? 'T' : i == 13 || i == 16 ? ':' : i == 19 ? '.' : '0';
    bool ok = expected == '0' ? std::isdigit(static_cast<unsigned char>(s[i])) != 0 : s[i] == expected;
    if (!ok) return false;
  }
  return true;
}

std::optional<log::Level> parse_written_level(const std::string& name) {
  if (name == "warning") return log::Level::warn;  // spdlog's spelling
  auto level = log::parse_level(name);
  if (level == log::Level::off) return std::nullopt;
  return level;
}

std::string actor_of_file_name(const std::string& file_name) {
  const std::string suffix = ".log";
  return file_name.substr(0, file_name.size() - suffix.size());
}

}  // namespace

std::optional<LogEntry> parse_log_line(const std::string& line, const std::string& actor) {
  if (!is_timestamp(line) || line.size() <= kTimestampLength || line[kTimestampLength] != ' ') return std::nullopt;
  std::size_t level_start = kTimestampLength + 1;
  std::size_t level_end = line.find(' ', level_start);
  if (level_end == std::string::npos) return std::nullopt;
  auto level = parse_written_level(line.substr(level_start, level_end - level_start));
  std::size_t name_start = line.find_first_not_of(' ', level_end);
  if (!level || name_start == std::string::npos || line[name_start] != '[') return std::nullopt;
  return LogEntry{line.substr(0, kTimestampLength), *level, actor, line};
}

std::vector<LogEntry> parse_log_text(const std::string& text, const std::string& actor,
                                     const std::optional<LogEntry>& previous) {
  std::vector<LogEntry> entries;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (auto entry = parse_log_line(line, actor)) {
      entries.push_back(std::move(*entry));
    } else if (!entries.empty()) {
      entries.back().text += "\n" + line;
    } else {
      LogEntry orphan = previous.value_or(LogEntry{});
      orphan.actor = actor;
      orphan.text = line;
      entries.push_back(std::move(orphan));
    }
  }
  return entries;
}

bool LogFilter::accepts_node(const std::string& node) const {
  return nodes.empty() || std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

bool LogFilter::accepts_actor(const std::string& file_actor) const {
  if (actors.empty()) return true;
  return std::any_of(actors.begin(), actors.end(), [&](const std::string& a) {
    return a == file_actor || actor_of_file_name(log::component_file_name(a)) == file_actor;
  });
}

bool LogFilter::accepts(const LogEntry& entry) const {
  return accepts_actor(entry.actor) && static_cast<int>(entry.level) >= static_cast<int>(min_level);
}

void sort_by_time(std::vector<LogEntry>& entries) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const LogEntry& a, const LogEntry& b) { return a.timestamp < b.timestamp; });
}

fs::path find_log_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw RunError("no such run or logs directory: " + dir.string());
  if (fs::is_directory(dir / "logs", ec)) return dir / "logs";
  if (fs::exists(dir / "experiment.toml", ec) || fs::is_directory(dir / "nodes", ec)) return dir;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".log") return dir;
  throw RunError(dir.string() + " holds no logs: give a run directory or its logs/ directory");
}

LogFollower::LogFollower(fs::path log_dir, LogFilter filter)
    : log_dir_(std::move(log_dir)), filter_(std::move(filter)) {}

std::vector<LogEntry> LogFollower::poll(bool final) {
  std::vector<LogEntry> entries;
  if (filter_.accepts_node("local")) poll_dir(log_dir_, "local", final, entries);
  std::vector<fs::path> nodes;
  std::error_code ec;
  for (fs::directory_iterator it(log_dir_ / "nodes", ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && filter_.accepts_node(it->path().filename().string())) nodes.push_back(it->path());
  std::sort(nodes.begin(), nodes.end());
  for (const auto& dir : nodes) poll_dir(dir, dir.filename().string(), final, entries);
  sort_by_time(entries);
  return entries;
}

void LogFollower::poll_dir(const fs::path& dir, const std::string& node, bool final, std::vector<LogEntry>& out) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".log" && it->is_regular_file(ec)) files.push_back(it->path());
  std::sort(files.begin(), files.end());  // fixed order for entries with equal times
  for (const auto& file : files) {
    std::string actor = actor_of_file_name(file.filename().string());
    if (!filter_.accepts_actor(actor)) continue;
    for (auto& entry : read_new(file, actor, files_[node + "/" + actor], final)) {
      entry.node = node;
      if (filter_.accepts(entry)) out.push_back(std::move(entry));
    }
  }
}

std::vector<LogEntry> LogFollower::read_new(const fs::path& file, const std::string& actor, FileState& state,
                                            bool final) {
  std::error_code ec;
  auto size = fs::file_size(file, ec);
  if (ec) return {};
  if (size < state.offset) state = FileState{};  // truncated or replaced: start over
  if (size == state.offset && !(final && !state.partial.empty())) return {};
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(state.offset));
  std::string chunk(static_cast<std::size_t>(size - state.offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<std::size_t>(in.gcount()));
  state.offset += chunk.size();

  std::string text = std::move(state.partial) + chunk;
  state.partial.clear();
  std::size_t complete = final ? text.size() : text.rfind('\n') + 1;  // npos + 1 == 0: no complete line yet
  state.partial = text.substr(complete);
  text.resize(complete);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty() && complete == 0) return {};
  auto entries = parse_log_text(text, actor, state.last);
  if (!entries.empty()) state.last = entries.back();
  return entries;
}

std::vector<LogEntry> read_logs(const fs::path& log_dir, const LogFilter& filter) {
  return LogFollower(log_dir, filter).poll(/*final=*/true);
}

bool SeedWindow::accepts(const LogEntry& entry) {
  // The node's line at each seed's start reads "... [node] seed N: U units, C committed before".
  if (entry.actor == "node" && entry.node == "local") {
    const auto at = entry.text.find("[node] seed ");
    if (at != std::string::npos) {
      try {
        std::size_t used = 0;
        const auto n = std::stoull(entry.text.substr(at + 12), &used);
        if (entry.text.compare(at + 12 + used, 1, ":") == 0) current_ = n;
      } catch (const std::exception&) {
      }
    }
  }
  return current_ == seed_;
}

}  // namespace crucible::run

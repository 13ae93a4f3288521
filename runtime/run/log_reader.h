#pragma once
// Reads the per-actor log files a run writes (logs/<actor>.log, see log::Options::directory, and each evaluator
// node's logs/nodes/<node>/<actor>.log): parses their lines, filters them by node, actor and level, merges them in
// time order, and follows files as they grow.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "logging/log.h"
#include "run/run_error.h"

namespace crucible::run {

struct LogEntry {
  std::string timestamp;  // "2024-05-01T12:00:00.123": local time, sorts as text
  log::Level level = log::Level::info;
  std::string actor;  // the file's name without ".log"
  std::string text;   // as written, lines of a multi-line message included, without the final newline
  std::string node = "local";  // the evaluator node that wrote it; "local": the coordinator's own node
};

// A line as the logging facade writes it; nullopt for any other line (the next line of a multi-line message).
std::optional<LogEntry> parse_log_line(const std::string& line, const std::string& actor);

// The entries of one file's complete lines. A line that is not an entry's first joins the entry before it; with no
// entry before it in `text` it becomes an entry of its own with the time and level of `previous` (the file's last
// entry seen so far), so a message split across two reads keeps its place and level.
std::vector<LogEntry> parse_log_text(const std::string& text, const std::string& actor,
                                     const std::optional<LogEntry>& previous = std::nullopt);

struct LogFilter {
  std::vector<std::string> actors;  // actor names as given to the logger; empty: every actor
  std::vector<std::string> nodes;   // node names ("local": the coordinator's); empty: every node
  log::Level min_level = log::Level::trace;
  bool accepts_actor(const std::string& file_actor) const;
  bool accepts_node(const std::string& node) const;
  bool accepts(const LogEntry& entry) const;
};

// One seed's lines of a run whose seeds all log into one logs/ directory: from the coordinator node's
// "seed N: ..." line to the next seed's. Feed it entries in time order.
class SeedWindow {
 public:
  explicit SeedWindow(uint64_t seed) : seed_(seed) {}
  bool accepts(const LogEntry& entry);

 private:
  uint64_t seed_;
  std::optional<uint64_t> current_;
};

// Stable: entries with the same time keep their order.
void sort_by_time(std::vector<LogEntry>& entries);

// `dir` may be a run directory (its logs/ is used) or a logs directory. RunError when it does not exist, or when it
// is neither: no logs/, no *.log files, no nodes/ and no experiment.toml (a run that has not written a log yet).
std::filesystem::path find_log_dir(const std::filesystem::path& dir);

// Everything in the *.log files of a logs directory so far, then on each later call what was appended since,
// including files created in the meantime.
class LogFollower {
 public:
  LogFollower(std::filesystem::path log_dir, LogFilter filter);
  // New entries of every accepted file, in time order. A last line still missing its newline waits for the next
  // call, unless `final` (nothing more is coming).
  std::vector<LogEntry> poll(bool final = false);

 private:
  struct FileState {
    std::uintmax_t offset = 0;
    std::string partial;  // bytes after the last newline read
    std::optional<LogEntry> last;
  };
  std::vector<LogEntry> read_new(const std::filesystem::path& file, const std::string& actor, FileState& state,
                                 bool final);
  void poll_dir(const std::filesystem::path& dir, const std::string& node, bool final, std::vector<LogEntry>& out);

  std::filesystem::path log_dir_;
  LogFilter filter_;
  std::map<std::string, FileState> files_;  // by node/actor
};

// All entries of a logs directory that pass `filter`, in time order.
std::vector<LogEntry> read_logs(const std::filesystem::path& log_dir, const LogFilter& filter);

}  // namespace crucible::run

#pragma once
// Logging facade: named loggers per component; console, an optional rotating file and optional per-component files.
// spdlog stays behind this header so torch-heavy translation units (whose include path carries another fmt) never
// see it.
#include <cstddef>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace crucible::log {

enum class Level { trace, debug, info, warn, error, critical, off };

struct Options {
  Level console_level = Level::info;
  Level file_level = Level::debug;
  std::string file;  // rotating log file; empty: console only
  std::size_t max_file_bytes = std::size_t{16} << 20;
  std::size_t max_files = 3;
  // Also one file per component, <directory>/<component_file_name>, at file_level: opened on the component's first
  // line, flushed on every line so it can be followed live and survives a kill. Empty: none.
  std::string directory;
  // An evaluator node's name: its lines read "[<node>/<component>]", so they stay recognisable wherever they go.
  std::string node;
  // Also hands every line at file_level (formatted as in files, without its newline) to this function, with the
  // component's name: how an evaluator node ships its lines to the run it serves. Called on the logging thread.
  std::function<void(const std::string& component, const std::string& line)> forward;
};

// Lines in files read "2024-05-01T12:00:00.123 info  [compiler] message" (level names as in parse_level, except
// "warning" for warn). A component's file name under Options::directory is "<component>.log", with any character
// outside [A-Za-z0-9._-] replaced by '_'.
std::string component_file_name(std::string_view component);

// Safe to call again: later calls replace the sinks of every logger.
void init(const Options& options);
void write(std::string_view component, Level level, std::string_view message);
void flush();
std::optional<Level> parse_level(std::string_view name);

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

// A component's logger: log::Logger log{"compiler"}; log.info("cache hit ", hash);
class Logger {
 public:
  explicit Logger(std::string component) : component_(std::move(component)) {}
  template <typename... A> void debug(const A&... a) const { write(component_, Level::debug, cat(a...)); }
  template <typename... A> void info(const A&... a) const { write(component_, Level::info, cat(a...)); }
  template <typename... A> void warn(const A&... a) const { write(component_, Level::warn, cat(a...)); }
  template <typename... A> void error(const A&... a) const { write(component_, Level::error, cat(a...)); }
  const std::string& component() const { return component_; }

 private:
  std::string component_;
};

}  // namespace crucible::log

#include "logging/log.h"

#include <spdlog/details/file_helper.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

namespace crucible::log {
namespace {

constexpr const char* kConsolePattern = "%Y-%m-%dT%H:%M:%S.%e %^%-5l%$ [%n] %v";
constexpr const char* kFilePattern = "%Y-%m-%dT%H:%M:%S.%e %-5l [%n] %v";

// One component's own file: opened on the first line that reaches it, flushed after every line so `crucible logs
// --follow` sees it at once and a killed process loses nothing it logged.
class ComponentFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ComponentFileSink(std::filesystem::path path) : path_(std::move(path)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!opened_) {
      std::filesystem::create_directories(path_.parent_path());
      file_.open(path_.string(), /*truncate=*/false);
      opened_ = true;
    }
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.write(line);
    file_.flush();
  }
  void flush_() override {
    if (opened_) file_.flush();
  }

 private:
  std::filesystem::path path_;
  spdlog::details::file_helper file_;
  bool opened_ = false;
};

// Every line to Options::forward.
class ForwardSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ForwardSink(std::function<void(const std::string&, const std::string&)> forward)
      : forward_(std::move(forward)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::string text(line.data(), line.size());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    forward_(std::string(msg.logger_name.data(), msg.logger_name.size()), text);
  }
  void flush_() override {}

 private:
  std::function<void(const std::string&, const std::string&)> forward_;
};

std::mutex g_mutex;
std::vector<spdlog::sink_ptr> g_sinks;  // shared by every component
Options g_options;

spdlog::level::level_enum to_spdlog(Level l) { return static_cast<spdlog::level::level_enum>(static_cast<int>(l)); }

// The patterns with the node's name before each component's, on an evaluator node.
std::string tagged(const char* pattern) {
  if (g_options.node.empty()) return pattern;
  std::string p = pattern;
  p.replace(p.find("[%n]"), 4, "[" + g_options.node + "/%n]");
  return p;
}

std::vector<spdlog::sink_ptr>& shared_sinks() {
  if (g_sinks.empty()) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_level(spdlog::level::info);
    console->set_pattern(tagged(kConsolePattern));
    g_sinks.push_back(console);
  }
  return g_sinks;
}

std::vector<spdlog::sink_ptr> sinks_for(const std::string& component) {
  auto sinks = shared_sinks();
  if (!g_options.directory.empty() && !component.empty()) {
    auto own = std::make_shared<ComponentFileSink>(std::filesystem::path(g_options.directory) /
                                                   component_file_name(component));
    own->set_level(to_spdlog(g_options.file_level));
    own->set_pattern(tagged(kFilePattern));
    sinks.push_back(own);
  }
  return sinks;
}

std::shared_ptr<spdlog::logger> logger_for(std::string_view component) {
  std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  auto sinks = sinks_for(name);
  auto logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

std::string component_file_name(std::string_view component) {
  std::string name(component);
  for (char& c : name) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                 c == '-';
    if (!plain) c = '_';
  }
  return name + ".log";
}

void init(const Options& options) {
  std::lock_guard lock(g_mutex);
  g_options = options;
  g_sinks.clear();
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(to_spdlog(options.console_level));
  console->set_pattern(tagged(kConsolePattern));
  g_sinks.push_back(console);
  if (options.forward) {
    auto forward = std::make_shared<ForwardSink>(options.forward);
    forward->set_level(to_spdlog(options.file_level));
    forward->set_pattern(tagged(kFilePattern));
    g_sinks.push_back(forward);
  }
  if (!options.file.empty()) {
    auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options.file, options.max_file_bytes,
                                                                       options.max_files);
    file->set_level(to_spdlog(options.file_level));
    file->set_pattern(tagged(kFilePattern));
    g_sinks.push_back(file);
  }
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { l->sinks() = sinks_for(l->name()); });
}

void write(std::string_view component, Level level, std::string_view message) {
  std::shared_ptr<spdlog::logger> logger;
  {
    std::lock_guard lock(g_mutex);
    logger = logger_for(component);
  }
  logger->log(to_spdlog(level), "{}", message);
}

void flush() {
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
}

std::optional<Level> parse_level(std::string_view name) {
  static constexpr std::array<std::string_view, 7> names{"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<Level>(i);
  return std::nullopt;
}

}  // namespace crucible::log

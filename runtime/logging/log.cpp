#include "logging/log.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <mutex>
#include <vector>

namespace crucible::log {
namespace {

std::mutex g_mutex;
std::vector<spdlog::sink_ptr> g_sinks;

spdlog::level::level_enum to_spdlog(Level l) { return static_cast<spdlog::level::level_enum>(static_cast<int>(l)); }

std::vector<spdlog::sink_ptr>& sinks() {
  if (g_sinks.empty()) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_level(spdlog::level::info);
    g_sinks.push_back(console);
  }
  return g_sinks;
}

std::shared_ptr<spdlog::logger> logger_for(std::string_view component) {
  std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  auto& s = sinks();
  auto logger = std::make_shared<spdlog::logger>(name, s.begin(), s.end());
  logger->set_level(spdlog::level::trace);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%-5l%$ [%n] %v");
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

void init(const Options& options) {
  std::lock_guard lock(g_mutex);
  g_sinks.clear();
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(to_spdlog(options.console_level));
  g_sinks.push_back(console);
  if (!options.file.empty()) {
    auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options.file, options.max_file_bytes,
                                                                       options.max_files);
    file->set_level(to_spdlog(options.file_level));
    g_sinks.push_back(file);
  }
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { l->sinks() = g_sinks; });
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

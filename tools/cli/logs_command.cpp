// crucible logs: a run's per-actor logs, its evaluator nodes' included, merged in time order, optionally followed as
// they grow.
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "run/log_reader.h"

namespace crucible::cli {
namespace {

struct LogsArgs {
  std::string dir;
  std::vector<std::string> actors;
  std::vector<std::string> nodes;
  std::string level = "trace";
  bool follow = false;
};

constexpr auto kPollInterval = std::chrono::milliseconds(200);

void print(const std::vector<run::LogEntry>& entries) {
  for (const auto& e : entries) std::cout << e.text << "\n";
  std::cout << std::flush;
}

int show_logs(const LogsArgs& a) {
  std::filesystem::path log_dir;
  try {
    log_dir = run::find_log_dir(a.dir);
  } catch (const run::RunError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  run::LogFilter filter;
  filter.actors = a.actors;
  filter.nodes = a.nodes;
  filter.min_level = *log::parse_level(a.level);
  run::LogFollower follower(log_dir, filter);
  if (!a.follow) {
    print(follower.poll(/*final=*/true));
    return 0;
  }
  for (;;) {  // until interrupted
    print(follower.poll());
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

Run add_logs_command(CLI::App& app) {
  auto args = std::make_shared<LogsArgs>();
  auto* cmd = app.add_subcommand("logs", "Print a run's per-actor logs (its evaluator nodes' too), merged in time order");
  cmd->add_option("dir", args->dir, "Run directory (or its logs/ directory)")->required();
  cmd->add_option("--actor", args->actors, "Only this actor's log (repeatable)")->allow_extra_args(false);
  cmd->add_option("--node", args->nodes, "Only this evaluator node's logs (repeatable; \"local\": the coordinator's)")
      ->allow_extra_args(false);
  cmd->add_option("--level", args->level, "Minimum level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical"}))
      ->capture_default_str();
  cmd->add_flag("--follow,-f", args->follow, "Keep printing new lines, also from actors that start later");
  return [cmd, args]() -> int { return cmd->parsed() ? show_logs(*args) : -1; };
}

}  // namespace crucible::cli

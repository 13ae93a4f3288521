// crucible logs: a run's per-actor logs, its evaluator nodes' included, merged in time order, optionally followed as
// they grow.
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include <optional>
#include <set>

#include "cli/commands.h"
#include "run/log_reader.h"
#include "run/run_lock.h"

namespace crucible::cli {
namespace {

struct LogsArgs {
  std::string dir;
  std::vector<std::string> actors;
  std::vector<std::string> nodes;
  std::string level = "info";
  bool follow = false;
  std::optional<uint64_t> seed;
};

constexpr auto kPollInterval = std::chrono::milliseconds(200);

// With --seed the follower reads every line, so the window sees each seed's start whatever the filter keeps out;
// the filter is applied here.
void print(const std::vector<run::LogEntry>& entries, const run::LogFilter& filter, run::SeedWindow* seed) {
  for (const auto& e : entries)
    if ((!seed || seed->accepts(e)) && filter.accepts(e)) std::cout << e.text << "\n";
  std::cout << std::flush;
}

// An --actor or --node that matches nothing would print nothing: say which exist. Returns the message, or "".
std::string unknown_names(const std::filesystem::path& log_dir, const run::LogFilter& asked) {
  std::set<std::string> actors, nodes;
  for (const auto& e : run::read_logs(log_dir, run::LogFilter{})) actors.insert(e.actor), nodes.insert(e.node);
  auto list = [](const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? std::string("none yet") : out;
  };
  for (const auto& a : asked.actors) {
    run::LogFilter one;
    one.actors = {a};
    if (std::none_of(actors.begin(), actors.end(), [&](const std::string& x) { return one.accepts_actor(x); }))
      return "no actor '" + a + "' in " + log_dir.string() + " (actors: " + list(actors) + ")";
  }
  for (const auto& n : asked.nodes)
    if (!nodes.count(n)) return "no node '" + n + "' in " + log_dir.string() + " (nodes: " + list(nodes) + ")";
  return "";
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
  if (const auto unknown = unknown_names(log_dir, filter); !unknown.empty()) {
    if (!a.follow) {
      std::cerr << "error: " << unknown << "\n";
      return 2;
    }
    std::cerr << "warning: " << unknown << "; waiting for it\n";  // a node may join later
  }
  std::optional<run::SeedWindow> window;
  if (a.seed) window.emplace(*a.seed);
  run::LogFollower follower(log_dir, window ? run::LogFilter{} : filter);
  if (!a.follow) {
    print(follower.poll(/*final=*/true), filter, window ? &*window : nullptr);
    return 0;
  }
  // Until the run ends (nothing holds its directory's lock any more), or until interrupted.
  const auto run_dir = log_dir.filename() == "logs" ? log_dir.parent_path() : log_dir;
  for (;;) {
    const bool running = run::RunLock::held(run_dir);
    print(follower.poll(/*final=*/!running), filter, window ? &*window : nullptr);
    if (!running) return 0;
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
  cmd->add_option("--seed", args->seed, "Only the lines of this seed's run (from its \"seed N:\" line to the next seed's)");
  cmd->add_flag("--follow,-f", args->follow,
                "Keep printing new lines, also from actors that start later, until the run ends");
  return [cmd, args]() -> int { return cmd->parsed() ? show_logs(*args) : -1; };
}

}  // namespace crucible::cli

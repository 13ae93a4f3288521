// crucible run [EXPERIMENT.toml] [--out DIR] | --resume DIR: the main job, on the embedded quickstart by default.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <optional>
#include <memory>

#include "cli/commands.h"
#include "config/toml_reader.h"
#include "experiment/experiment.h"
#include "actors/run/run_experiment.h"
#include "report/run_record.h"

namespace crucible::cli {
namespace {

struct RunArgs {
  std::string experiment;
  std::string out;
  std::string resume;
  bool quiet = false;
  std::optional<int> monitor;  // a loopback port for the live page (0: any free port)
};

// Ctrl-C (or a TERM) ends the run at once; committed units are durable, so the message says how to go on. The text
// is made now: a signal handler may only write(2) and _exit(2).
void say_how_to_resume_on_interrupt(const std::filesystem::path& dir) {
  static std::string message;
  message = "\ninterrupted: committed units are kept; continue with: crucible run --resume " + dir.string() + "\n";
  struct sigaction action {};
  action.sa_handler = [](int signal) {
    [[maybe_unused]] auto written = ::write(STDERR_FILENO, message.data(), message.size());
    _exit(128 + signal);
  };
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// --resume continues a run that crucible started: it recorded a start (starts.jsonl) or holds seed directories. A
// directory with only an experiment file is not one (it may be a folder of configs); resuming it would write a
// whole new run there, so it is refused with the command that starts one (in a new directory).
void refuse_unstarted_run(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "experiment.toml", ec) || std::filesystem::exists(dir / "starts.jsonl", ec) ||
      report::is_run_directory(dir))
    return;  // a missing experiment.toml is refused later with its own message
  throw std::invalid_argument(dir.string() + " holds an experiment.toml but no run was started there (no starts.jsonl, "
                              "no seed-N directories): nothing to resume. Start a run of it with: crucible run " +
                              (dir / "experiment.toml").string());
}

int run(const RunArgs& a, CLI::App& app) {
  node::RunRequest request;
  try {
    if (!a.resume.empty()) {
      if (!a.experiment.empty()) throw std::invalid_argument("--resume continues the run's own experiment; give no file");
      request.dir = a.resume;
      request.resume = true;
      refuse_unstarted_run(request.dir);
      request.experiment = experiment::load_experiment(request.dir / "experiment.toml");
    } else {
      request.experiment = a.experiment.empty()
                               ? experiment::parse_experiment(experiment::default_experiment_text(), "<quickstart>")
                               : experiment::load_experiment(a.experiment);
      request.dir = a.out.empty() ? node::default_run_dir(request.experiment) : std::filesystem::path(a.out);
    }
    if (a.monitor) {
      auto& m = request.experiment.monitor;
      m.host = "127.0.0.1";
      m.port = static_cast<uint16_t>(*a.monitor);
      m.listen = m.host + ":" + std::to_string(*a.monitor);
    }
    request.quiet = a.quiet;
    request.console_level = *log::parse_level(app["--log-level"]->as<std::string>());
    node::check_runnable(request.experiment);
    request.lock = node::lock_run_directory(request);
  } catch (const config::ConfigError& e) {
    std::cerr << "experiment error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::cout << "run directory: " << request.dir.string() << "\n" << std::flush;
  say_how_to_resume_on_interrupt(request.dir);
  node::RunResult result;
  try {
    result = node::run_experiment(request);
  } catch (const std::exception& e) {
    // Nothing is lost: committed units stay in the directory.
    result = {false, e.what(), request.dir, ""};
  }
  if (!result.ok) {
    std::cerr << "run stopped: " << result.message << "\ncontinue with: crucible run --resume " << result.dir.string()
              << "\n";
    return 1;
  }
  std::cout << result.summary << "summary: " << (result.dir / "summary.json").string() << "\n";
  return 0;
}

}  // namespace

Run add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run an experiment (GRPO, best-of-N or TTT); the quickstart by default");
  cmd->add_option("experiment", args->experiment, "Experiment TOML (default: the built-in configs/quickstart.toml)");
  cmd->add_option("--out", args->out, "Run directory (default: <run_root>/<name>-<UTC time>)");
  cmd->add_option("--resume", args->resume, "Continue the run in this directory: committed units are kept, the rest redone");
  cmd->add_flag("--quiet", args->quiet, "No progress lines");
  cmd->add_option("--monitor", args->monitor, "Serve the live status page on 127.0.0.1:PORT (0: any free port)")
      ->check(CLI::Range(0, 65535));
  return [cmd, args, &app]() { return cmd->parsed() ? run(*args, app) : -1; };
}

}  // namespace crucible::cli

// crucible: the command-line entry point. Each subcommand lives in tools/cli/.
#include <malloc.h>

#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "logging/log.h"
#include "run/run_metadata.h"

int main(int argc, char** argv) {
  // LibTorch's CPU tensors above glibc's mmap threshold were mapped fresh and unmapped when freed, so each training
  // step faulted the same activations in again (100 sft steps of the tiny model: 270k page faults, 0.6 s of system
  // time; munmap also interrupts every core the process's threads ran on). Freed memory is now kept for reuse.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"Crucible: execution-grounded evaluation and RL for GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "crucible " + crucible::run::crucible_version() + " (commit " +
                                        crucible::run::build_commit() + ")");
  std::string log_level = "warn", log_file;
  app.add_option("--log-level", log_level, "Console log level (trace, debug, info, warn, error, off)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--log-file", log_file, "Also log (from debug up) to this rotating file");
  std::vector<crucible::cli::Run> commands{crucible::cli::add_eval_command(app),
                                           crucible::cli::add_tasks_command(app),
                                           crucible::cli::add_logs_command(app),
                                           crucible::cli::add_run_command(app),
                                           crucible::cli::add_generate_command(app),
                                           crucible::cli::add_sft_command(app),
                                           crucible::cli::add_sft_data_command(app),
                                           crucible::cli::add_node_command(app),
                                           crucible::cli::add_cache_command(app),
                                           crucible::cli::add_serve_command(app),
                                           crucible::cli::add_report_command(app),
                                           crucible::cli::add_runs_command(app),
                                           crucible::cli::add_show_command(app)};
  // Usage errors (an unknown or missing subcommand, a missing option, a value out of range) are bad input: exit 2,
  // as every command's own checks; --help and --version exit 0.
  std::string names;
  bool known = false;
  for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "error: unknown command '" << argv[1] << "' (commands: " << names << ")\n";
    return 2;
  }
  if (argc == 1) {
    std::cerr << "error: give a command (" << names << "); crucible --help says more\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  crucible::log::Options log_options;
  log_options.console_level = *crucible::log::parse_level(log_level);
  log_options.file = log_file;
  crucible::log::init(log_options);
  try {
    for (auto& run : commands)
      if (int rc = run(); rc >= 0) return rc;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}

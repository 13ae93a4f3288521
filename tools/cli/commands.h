#pragma once
// Each subcommand registers its options on the app and returns the function that runs it.
#include <CLI/CLI.hpp>

#include <functional>

namespace crucible::cli {

using Run = std::function<int()>;

Run add_eval_command(CLI::App& app);
Run add_tasks_command(CLI::App& app);
Run add_logs_command(CLI::App& app);
Run add_run_command(CLI::App& app);
Run add_generate_command(CLI::App& app);
Run add_sft_command(CLI::App& app);
Run add_sft_data_command(CLI::App& app);
Run add_node_command(CLI::App& app);
Run add_cache_command(CLI::App& app);
Run add_serve_command(CLI::App& app);
Run add_report_command(CLI::App& app);
Run add_runs_command(CLI::App& app);
Run add_show_command(CLI::App& app);

}  // namespace crucible::cli

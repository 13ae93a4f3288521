// crucible: the command-line entry point. Each subcommand lives in tools/cli/.
#include <iostream>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Crucible: execution-grounded evaluation and RL for GPU kernels"};
  app.require_subcommand(1);
  std::vector<crucible::cli::Run> commands{crucible::cli::add_eval_command(app),
                                           crucible::cli::add_tasks_command(app)};
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& run : commands)
      if (int rc = run(); rc >= 0) return rc;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}

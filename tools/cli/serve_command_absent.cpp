#include <iostream>

#include "cli/commands.h"

namespace crucible::cli {

Run add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (not in this build)");
  cmd->allow_extras();
  return [cmd]() -> int {
    if (!cmd->parsed()) return -1;
    std::cerr << "error: this build has no HTTP server (Debian's libcpp-httplib-dev was missing when it was built)\n";
    return 2;
  };
}

}  // namespace crucible::cli

#pragma once
// Runs the crucible binary as a user would, with its compile cache in a test's scratch directory.
#include <string>
#include <vector>

#include "crucible/eval/subprocess.h"

namespace crucible::test {

inline eval::ProcessResult crucible_cli(const std::vector<std::string>& args, const std::string& cache,
                                        double wall_seconds = 120) {
  std::vector<std::string> argv{"env", "CRUCIBLE_CACHE_DIR=" + cache, CRUCIBLE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  eval::ProcessLimits limits;
  limits.wall_seconds = wall_seconds;
  return eval::run_process(argv, limits);
}

}  // namespace crucible::test

#include "crucible/eval/scratch_dirs.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace crucible::eval {
namespace fs = std::filesystem;

fs::path make_scratch_dir(std::string_view kind) {
  std::string pattern =
      (fs::temp_directory_path() / ("crucible-" + std::string(kind) + "-" + std::to_string(getpid()) + "-XXXXXX"))
          .string();
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot make a " + std::string(kind) + " directory: " + std::strerror(errno));
  return pattern;
}

int remove_orphaned_scratch_dirs(std::string_view kind) {
  const std::string prefix = "crucible-" + std::string(kind) + "-";
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || !end || *end != '-') continue;  // not named by a process (older layouts are left alone)
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its maker still runs
    std::error_code ignored;
    if (fs::remove_all(entry.path(), ignored) > 0) ++removed;
  }
  return removed;
}

}  // namespace crucible::eval

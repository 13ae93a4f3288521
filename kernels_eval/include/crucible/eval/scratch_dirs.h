#pragma once
// Private temporary directories of workers and compiles, named for the process that made them, so that the ones an
// evaluator killed outright (kill -9) left behind are found and removed by the next evaluator.
#include <filesystem>
#include <string_view>

namespace crucible::eval {

// A new empty directory, mode 0700, under the system's temporary directory: crucible-<kind>-<pid>-XXXXXX. Throws
// std::runtime_error when it cannot be made (a full disk).
std::filesystem::path make_scratch_dir(std::string_view kind);

// Removes every crucible-<kind>-<pid>-* directory whose process is gone; returns how many.
int remove_orphaned_scratch_dirs(std::string_view kind);

}  // namespace crucible::eval

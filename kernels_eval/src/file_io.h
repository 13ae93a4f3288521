#pragma once
// Whole files: read at once, and written so that readers see all of a file or none of it.
#include <filesystem>
#include <string>

namespace crucible::eval {

// Throws std::runtime_error naming the file when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// The file's bytes, or "" where it cannot be read.
std::string read_file_or_empty(const std::filesystem::path& path);

// Written beside the target under a temporary name, then renamed over it. Throws naming the file when it cannot be
// written (a full disk), and leaves nothing half-written behind.
void write_file_atomically(const std::filesystem::path& target, const std::string& data);

}  // namespace crucible::eval

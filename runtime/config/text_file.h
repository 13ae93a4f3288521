#pragma once
// A whole text file as a string; throws std::invalid_argument naming the file when it cannot be read.
#include <cstddef>
#include <filesystem>
#include <string>

namespace crucible::config {

std::string read_text_file(const std::filesystem::path& path);
// A file that must be a regular file of at most `max_bytes` (a config, not whatever a path names): a directory, a
// device or a larger file is refused before it is read. The std::invalid_argument says what is wrong, without the
// file's name: the caller names it in its own error.
std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes);

}  // namespace crucible::config

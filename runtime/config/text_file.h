#pragma once
// A whole text file as a string; throws std::invalid_argument naming the file when it cannot be read.
#include <filesystem>
#include <string>

namespace crucible::config {

std::string read_text_file(const std::filesystem::path& path);

}  // namespace crucible::config

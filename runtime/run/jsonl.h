#pragma once
// Reading the run directory's JSONL files (candidates, steps, journal) back: one JSON value per non-empty line.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

namespace crucible::run {

// A missing file reads as empty. A line that does not parse throws, unless skip_malformed.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path, bool skip_malformed = false);

}  // namespace crucible::run

#pragma once
// What a run records about the machine and build each time it starts (first start and every resume), so a
// result can be traced to its commit and to how busy the machine was: DIR/starts.jsonl, copied into summary.json.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace crucible::run {

std::string crucible_version();  // "0.1.0"
std::string build_commit();      // the git commit the build was configured at ("unknown" outside a checkout)

// {"started_at", "resumed", "version", "commit", "host", "cpu", "cores", "gpus": [...], "load_average": [1, 5, 15]}
nlohmann::json start_metadata(bool resumed);

// Appends this start's metadata to DIR/starts.jsonl (durably); returns it.
nlohmann::json record_start(const std::filesystem::path& run_dir, bool resumed);

}  // namespace crucible::run

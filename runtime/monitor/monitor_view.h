#pragma once
// What the monitor serves, built from the live status and the run directory (runtime/report reads the records,
// run/log_reader the logs): the status document the page polls, the log tail with its filters, Prometheus
// metrics, and the page itself.
#include <filesystem>
#include <string>

#include "monitor/live_status.h"
#include "run/log_reader.h"

namespace crucible::monitor {

// {"live": {...}, "eta_seconds": N|null, "curves": [...], "recent": [...last verdicts...]}
std::string status_json(const LiveSnapshot& live, const std::filesystem::path& run_dir, double now);

// The newest `limit` log entries that pass the filter, oldest first: {"entries": [...], "actors": [...], "nodes": [...]}
std::string logs_json(const std::filesystem::path& run_dir, const run::LogFilter& filter, std::size_t limit = 200);

// Prometheus text exposition (version 0.0.4).
std::string prometheus_metrics(const LiveSnapshot& live, double now);

// The page: static HTML whose script polls status.json and logs.json (the token, if any, passed along).
std::string monitor_page();

}  // namespace crucible::monitor

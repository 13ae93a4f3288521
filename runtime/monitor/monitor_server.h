#pragma once
// The live view of a run over HTTP: GET / (the page), /status.json, /logs.json?actor=&node=&level=, and /metrics
// (Prometheus). Loopback by default; bound elsewhere it requires a token (`?token=` or `Authorization: Bearer`).
// Serves from its own threads; reads the live status and the run directory, never writes.
#include <filesystem>
#include <memory>
#include <string>

#include "monitor/live_status.h"

namespace crucible::monitor {

struct MonitorOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: any free port
  std::string token;  // required of every request when not empty
  std::filesystem::path run_dir;
};

// Loopback addresses need no token: 127.0.0.0/8, ::1, localhost.
bool is_loopback(const std::string& host);

class MonitorServer {
 public:
  // Binds and starts serving; throws std::runtime_error when the address cannot be bound, or std::invalid_argument
  // for a non-loopback host without a token (and where this build has no HTTP library).
  MonitorServer(MonitorOptions options, std::shared_ptr<const LiveStatus> status);
  ~MonitorServer();
  MonitorServer(const MonitorServer&) = delete;
  MonitorServer& operator=(const MonitorServer&) = delete;

  int port() const;
  std::string url() const;  // http://host:port/

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crucible::monitor

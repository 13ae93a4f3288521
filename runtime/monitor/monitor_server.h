#pragma once
// The live view of a run over HTTP: GET / (the page), /status.json, /logs.json?actor=&node=&level=, and /metrics
// (Prometheus). Loopback by default; bound elsewhere it requires a token (`?token=` or `Authorization: Bearer`).
// Serves from its own threads; reads the live status and the run directory, never writes. Takes no request bodies
// and holds connections within bounds (http_guard/server_limits.h), so slow or large requests cannot starve it.
#include <filesystem>
#include <memory>
#include <string>

#include "http_guard/loopback_host.h"
#include "http_guard/server_limits.h"
#include "monitor/live_status.h"

namespace crucible::monitor {

struct MonitorOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: any free port
  std::string token;  // required of every request when not empty
  std::filesystem::path run_dir;
  http_guard::ServerLimits limits;
};

// Loopback addresses need no token: 127.0.0.0/8, ::1, localhost (parsed addresses and the exact name).
inline bool is_loopback(const std::string& host) { return http_guard::is_loopback_host(host); }

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

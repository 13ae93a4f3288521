#pragma once
// What a node's network needs to know: TLS files and CAF's liveness settings. Plain values; cluster/transport.h
// applies them.
#include <string>

namespace crucible::cluster {

// Mutual TLS: each side shows `certificate` (with `key`) and accepts only a peer whose certificate `ca` signed.
struct TlsFiles {
  std::string certificate, key, ca;
  bool enabled() const { return !certificate.empty(); }
};

struct NetworkSettings {
  TlsFiles tls;
  double heartbeat_s = 1.0;
  double connection_timeout_s = 60.0;
};

}  // namespace crucible::cluster

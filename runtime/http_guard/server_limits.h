#pragma once
// The bounds a GuardedServer keeps (guarded_server.h), apart from the HTTP library so that options may carry them.
#include <chrono>
#include <cstddef>

#include "http_guard/connection_limits.h"

namespace crucible::http_guard {

struct ServerLimits {
  std::size_t max_body_bytes = 1024;
  ConnectionLimits connections;
  // The request line, headers and body must all have arrived this long after the connection is taken up.
  std::chrono::milliseconds request_deadline{5000};
  // A client that takes none of the response for this long is dropped.
  std::chrono::milliseconds write_timeout{5000};
};

}  // namespace crucible::http_guard

#pragma once
// A cpp-httplib server that bounds what a client can make it hold: one request per connection, which must arrive
// whole before a deadline; connections held at once, in all and per client address (more are answered 503 at
// once, their request unread); and request bodies, refused from the request head (see body_policy.h) before a byte
// of them is read. Debian's cpp-httplib 0.11 caps only bodies that declare Content-Length, reads chunked ones
// whole, and times out only each read, so these are decided here.
#include <httplib.h>

#include "http_guard/connection_limits.h"
#include "http_guard/server_limits.h"

namespace crucible::http_guard {

class GuardedServer : public httplib::Server {
 public:
  // Sets the pre-routing and Expect: 100-continue handlers (the body check): do not replace them.
  explicit GuardedServer(ServerLimits limits = {});
  const ConnectionCounter& connections() const { return counter_; }

 private:
  bool process_and_close_socket(socket_t sock) override;

  ServerLimits limits_;
  ConnectionCounter counter_;
};

}  // namespace crucible::http_guard

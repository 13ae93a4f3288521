#pragma once
// cpp-httplib's server, which serves each connection on a thread of its own, with bounds on what clients can hold:
// open connections in all and per client address (more are answered 503 at once), the time and bytes of a request's
// head and the time of its body (a client that trickles bytes is cut off), and a body limit enforced before the body
// is read (a Content-Length over it is refused unread; a chunked body stops being read at the limit). Routes are
// exact paths; every error answer, the library's own included, is JSON in OpenAI's shape. A handler can ask whether
// its client is still connected, so that work for a client that went away stops.
#include <httplib.h>

#include "http_guard/connection_limits.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace crucible::serving {

struct ConnectionLimits {
  std::size_t max_connections = 256;  // open at once; more are answered 503 and closed
  std::size_t max_per_client = 64;    // open at once from one client address
  double head_timeout_s = 10;         // a request's line and headers must be in within this
  std::size_t max_head_bytes = 64 << 10;
  double body_timeout_s = 60;         // its body within this, once the head is in
  double idle_timeout_s = 5;          // a kept-alive connection waits this long for its next request
  double io_timeout_s = 5;            // a socket that takes no bytes for this long fails the answer
  std::size_t max_body_bytes = 4 << 20;
  std::size_t max_requests_per_connection = 100;
};

class GuardedHttpServer : public httplib::Server {
 public:
  using BodyHandler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& body)>;

  explicit GuardedHttpServer(ConnectionLimits limits);
  ~GuardedHttpServer() override;

  void get(const std::string& path, Handler handler);
  // `handler` gets the whole body, at most max_body_bytes (decompressed).
  void post(const std::string& path, BodyHandler handler);

  // Stops accepting, gives requests in flight `grace` to finish, then cuts the connections left and waits for their
  // threads to end.
  void shut_down(std::chrono::duration<double> grace);

  // On a handler's thread: whether its client has closed its connection, or the server is shutting down.
  static bool client_gone();
  std::size_t open_connections() const { return admission_.held(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve(socket_t sock, const std::string& client);
  bool wait_for_request(socket_t sock) const;
  HandlerResponse screen(const httplib::Request& req, httplib::Response& res);

  ConnectionLimits limits_;
  http_guard::ConnectionCounter admission_;
  std::map<std::string, std::set<std::string>> methods_;  // path -> methods it answers
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::condition_variable ended_;
  std::set<socket_t> sockets_;  // connections being served
  std::size_t threads_ = 0;     // their threads, until each has let go of this server
};

}  // namespace crucible::serving

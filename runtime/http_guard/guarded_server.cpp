#include "http_guard/guarded_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include "http_guard/body_policy.h"
#include "http_guard/deadline_stream.h"

namespace crucible::http_guard {

namespace {

// Threads beyond the connections admitted at once: they answer the connections over a limit with 503 at once.
constexpr std::size_t kSpareThreads = 4;

std::vector<std::string> values_of(const httplib::Request& req, const char* name) {
  std::vector<std::string> values;
  const auto range = req.headers.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) values.push_back(it->second);
  return values;
}

BodyVerdict body_verdict(const httplib::Request& req, std::size_t max_bytes) {
  return check_body({req.method, values_of(req, "Content-Length"), values_of(req, "Transfer-Encoding"),
                     values_of(req, "Content-Encoding")},
                    max_bytes);
}

// What has already arrived is read and dropped, so that closing does not reset the connection before the client
// has read the answer; bounded, and never waits.
void drain_arrived(socket_t sock) {
  char scrap[4096];
  for (int i = 0; i < 16 && ::recv(sock, scrap, sizeof scrap, MSG_DONTWAIT) > 0; ++i) {
  }
}

void answer_busy(socket_t sock) {
  static const std::string busy =
      "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
      "Content-Length: 21\r\n\r\ntoo many connections\n";
  drain_arrived(sock);
  (void)::send(sock, busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

class Admission {
 public:
  Admission(ConnectionCounter& counter, std::string client)
      : counter_(counter), client_(std::move(client)), admitted_(counter_.try_admit(client_)) {}
  ~Admission() {
    if (admitted_) counter_.release(client_);
  }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  bool admitted() const { return admitted_; }

 private:
  ConnectionCounter& counter_;
  std::string client_;
  bool admitted_;
};

}  // namespace

GuardedServer::GuardedServer(ServerLimits limits) : limits_(limits), counter_(limits.connections) {
  const std::size_t threads = limits_.connections.max_connections + kSpareThreads;
  new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  set_payload_max_length(limits_.max_body_bytes);
  const std::size_t max_body = limits_.max_body_bytes;
  set_pre_routing_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    const BodyVerdict v = body_verdict(req, max_body);
    if (v.allowed()) return HandlerResponse::Unhandled;
    res.status = v.status;
    res.set_content(v.reason + "\n", "text/plain");
    return HandlerResponse::Handled;
  });
  set_expect_100_continue_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    const BodyVerdict v = body_verdict(req, max_body);
    if (v.allowed()) return 100;
    res.status = v.status;
    res.set_content(v.reason + "\n", "text/plain");
    return v.status;
  });
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  bool served = false;
  {
    Admission admission(counter_, peer_address(sock));
    if (admission.admitted()) {
      DeadlineStream stream(sock, DeadlineStream::Clock::now() + limits_.request_deadline, limits_.write_timeout);
      bool closed = false;
      served = process_request(stream, /*close_connection=*/true, closed, nullptr);
      drain_arrived(sock);
    } else {
      answer_busy(sock);
    }
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return served;
}

}  // namespace crucible::http_guard

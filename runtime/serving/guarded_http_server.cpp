#include "serving/guarded_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "serving/openai_api.h"

namespace crucible::serving {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits for `events` on `sock` until `deadline`; false on a timeout, an error or a hang-up without them.
bool wait_for(socket_t sock, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{sock, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n < 0 && errno != EINTR) return false;
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

int address_port(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

void peer_or_local(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int rc = peer ? getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length)
                      : getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length);
  ip = rc == 0 ? address_text(address) : "?";
  port = rc == 0 ? address_port(address) : 0;
}

void answer(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error_json(error), "application/json");
}

// A connection over a limit: told so at once, without waiting for (or reading) its request.
void refuse(socket_t sock) {
  const std::string body = error_json({503, "server_error", "too many connections (from this client or in all); retry later"});
  const std::string reply = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
  (void)!::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// After an answer that left the request's body unread: the client may still be sending it, and closing on unread
// bytes resets the connection, which can discard the answer before the client reads it. Reads on for a little.
void drain_before_close(socket_t sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = after(1.0);
  char sink[16384];
  std::size_t drained = 0;
  while (drained < (8u << 20) && wait_for(sock, POLLIN, deadline)) {
    const ssize_t n = ::recv(sock, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) break;
    if (n > 0) drained += static_cast<std::size_t>(n);
  }
}

// httplib hands each accepted socket to its task queue; this one serves it at once, on the accepting thread, where
// GuardedHttpServer decides whether it gets a thread of its own.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The socket as httplib reads and writes it: buffered (httplib reads a request's head a byte at a time), with a
// deadline and a byte limit for the head, then a deadline for the body.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, const ConnectionLimits& limits) : sock_(sock), limits_(limits) {}

  void start_request() {
    deadline_ = after(limits_.head_timeout_s);
    head_bytes_ = 0;
    in_head_ = true;
  }
  void start_body() {
    deadline_ = after(limits_.body_timeout_s);
    in_head_ = false;
  }
  bool buffered() const { return pos_ < len_; }
  // A read that ran past the head's bytes or a deadline: what follows on the connection cannot be trusted.
  bool cut_off() const { return cut_off_; }

  bool is_readable() const override { return buffered() || wait_for(sock_, POLLIN, read_deadline()); }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, after(limits_.io_timeout_s)); }
  ssize_t read(char* ptr, size_t size) override {
    if (!buffered() && !fill()) return -1;
    const std::size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buffer_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { peer_or_local(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { peer_or_local(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  Clock::time_point read_deadline() const { return std::min(deadline_, after(limits_.io_timeout_s)); }
  bool fill() {
    if ((in_head_ && head_bytes_ >= limits_.max_head_bytes) || !wait_for(sock_, POLLIN, read_deadline())) {
      cut_off_ = true;
      return false;
    }
    ssize_t n;
    do n = ::recv(sock_, buffer_, sizeof buffer_, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    pos_ = 0;
    len_ = static_cast<std::size_t>(n);
    if (in_head_) head_bytes_ += len_;
    return true;
  }

  socket_t sock_;
  const ConnectionLimits& limits_;
  Clock::time_point deadline_ = Clock::now();
  std::size_t head_bytes_ = 0;
  bool in_head_ = true;
  bool cut_off_ = false;
  char buffer_[8192];
  std::size_t pos_ = 0, len_ = 0;
};

struct Connection {
  socket_t sock;
  DeadlineStream* stream;
  const std::atomic<bool>* stopping;
  bool must_close = false;  // an answer left its request's body unread
};

// The connection this thread serves (each connection has a thread of its own), for handlers to ask about.
thread_local Connection* t_connection = nullptr;

}  // namespace

GuardedHttpServer::GuardedHttpServer(ConnectionLimits limits) : limits_(limits), admission_({limits.max_connections, limits.max_per_client}) {
  new_task_queue = [] { return new InlineQueue; };
  set_payload_max_length(limits_.max_body_bytes);
  // Only for the Keep-Alive header it writes: serve() runs the connection's loop with these.
  set_keep_alive_max_count(limits_.max_requests_per_connection);
  set_keep_alive_timeout(static_cast<time_t>(limits_.idle_timeout_s));
  set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return screen(req, res); });
  // Answers the library gives on its own (a malformed request line, headers over its limits) in the API's shape.
  set_error_handler(HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;
    answer(res, http_status_error(res.status));
    return HandlerResponse::Handled;
  }));
  set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    answer(res, {500, "server_error", what});
  });
}

GuardedHttpServer::~GuardedHttpServer() { shut_down(std::chrono::seconds(0)); }

void GuardedHttpServer::get(const std::string& path, Handler handler) {
  methods_[path].insert("GET");
  Get(path, std::move(handler));
}

void GuardedHttpServer::post(const std::string& path, BodyHandler handler) {
  methods_[path].insert("POST");
  Post(path, [this, handler](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    bool over = false;
    // Without a length or chunks a request has no body (a reader would wait for the connection to close).
    const bool has_body = req.has_header("Content-Length") || req.has_header("Transfer-Encoding");
    const bool read = !has_body || reader([&](const char* data, std::size_t n) {
      over = body.size() + n > limits_.max_body_bytes;
      if (!over) body.append(data, n);
      return !over;
    });
    if (over || !read) {
      if (t_connection) t_connection->must_close = true;
      res.set_header("Connection", "close");
      if (over)
        return answer(res, {413, "invalid_request_error",
                            "the request body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes"});
      return answer(res, {400, "invalid_request_error", "the request body could not be read (malformed, cut off or too slow)"});
    }
    handler(req, res, body);
  });
}

// Before routing, with only the head read: refuses what would otherwise be read first (a body over the limit, a body
// for a route that does not exist) or read without a bound.
httplib::Server::HandlerResponse GuardedHttpServer::screen(const httplib::Request& req, httplib::Response& res) {
  if (t_connection) t_connection->stream->start_body();
  const bool chunked = req.has_header("Transfer-Encoding");
  const std::string length = req.get_header_value("Content-Length");
  const bool has_body = chunked || (!length.empty() && length != "0");
  auto refuse_request = [&](const ApiError& error) {
    if (has_body) {  // its body stays unread: the connection cannot carry another request
      if (t_connection) t_connection->must_close = true;
      res.set_header("Connection", "close");
    }
    answer(res, error);
    return HandlerResponse::Handled;
  };
  const auto route = methods_.find(req.path);
  if (route == methods_.end()) return refuse_request(http_status_error(404));
  if (!route->second.count(req.method)) return refuse_request(http_status_error(405));
  if (chunked && (req.get_header_value("Transfer-Encoding") != "chunked" || !length.empty()))
    return refuse_request({400, "invalid_request_error", "only 'Transfer-Encoding: chunked', without a Content-Length, is understood"});
  if (!length.empty() && length.find_first_not_of("0123456789") != std::string::npos)
    return refuse_request({400, "invalid_request_error", "a malformed Content-Length"});
  if (!length.empty() && (length.size() > 18 || std::stoull(length) > limits_.max_body_bytes))
    return refuse_request({413, "invalid_request_error",
                           "the request body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes"});
  if (has_body && req.method != "POST")
    return refuse_request({400, "invalid_request_error", req.method + " " + req.path + " takes no body"});
  if (req.is_multipart_form_data()) return refuse_request(http_status_error(415));
  return HandlerResponse::Unhandled;
}

// On the accepting thread: a place for the connection, or a 503 at once.
bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  std::string client;
  int port = 0;
  peer_or_local(sock, true, client, port);
  if (stopping_ || !admission_.try_admit(client)) {
    refuse(sock);
    return false;
  }
  {
    std::lock_guard lock(mutex_);
    sockets_.insert(sock);
    ++threads_;
  }
  try {
    std::thread([this, sock, client] { serve(sock, client); }).detach();
  } catch (const std::system_error&) {  // no thread to be had
    {
      std::lock_guard lock(mutex_);
      sockets_.erase(sock);
      --threads_;
    }
    admission_.release(client);
    refuse(sock);
    return false;
  }
  return true;
}

bool GuardedHttpServer::wait_for_request(socket_t sock) const {
  const auto deadline = after(limits_.idle_timeout_s);
  while (!stopping_ && Clock::now() < deadline)
    if (wait_for(sock, POLLIN, std::min(deadline, after(0.1)))) return true;
  return false;
}

void GuardedHttpServer::serve(socket_t sock, const std::string& client) {
  DeadlineStream stream(sock, limits_);
  Connection connection{sock, &stream, &stopping_};
  t_connection = &connection;
  for (std::size_t left = limits_.max_requests_per_connection; left > 0 && !stopping_; --left) {
    if (!stream.buffered() && !wait_for_request(sock)) break;
    stream.start_request();
    bool closed = false;
    if (!process_request(stream, left == 1, closed, nullptr) || closed || connection.must_close || stream.cut_off())
      break;
  }
  t_connection = nullptr;
  if (connection.must_close) drain_before_close(sock);
  {
    std::lock_guard lock(mutex_);
    sockets_.erase(sock);  // before close: shut_down must never touch a number the system gave to a new socket
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  admission_.release(client);
  std::lock_guard lock(mutex_);
  --threads_;  // the last this thread does with the server
  ended_.notify_all();
}

bool GuardedHttpServer::client_gone() {
  const Connection* c = t_connection;
  if (!c) return false;
  if (*c->stopping) return true;
  pollfd p{c->sock, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return ::recv(c->sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;  // end of stream
}

void GuardedHttpServer::shut_down(std::chrono::duration<double> grace) {
  stop();
  stopping_ = true;
  std::unique_lock lock(mutex_);
  ended_.wait_for(lock, grace, [this] { return threads_ == 0; });
  for (socket_t sock : sockets_) ::shutdown(sock, SHUT_RDWR);  // wakes their threads from any wait
  ended_.wait(lock, [this] { return threads_ == 0; });
}

}  // namespace crucible::serving

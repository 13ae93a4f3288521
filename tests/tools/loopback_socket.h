#pragma once
// A raw TCP client on loopback for tests that must send what an HTTP client library would not: a head with no
// body after it, a header line every so often, a body the server should refuse. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

namespace crucible::test {

class LoopbackSocket {
 public:
  // Connects to 127.0.0.1:port from `source` (any address of 127.0.0.0/8); check ok().
  explicit LoopbackSocket(int port, const char* source = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
          ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  }
  ~LoopbackSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  bool ok() const { return ok_; }

  // Sends all of `data` unless the peer has closed or reset, or it stops reading for `limit`; returns whether all
  // of it went out.
  bool send_all(const std::string& data, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Everything the peer sends until it closes, or until `limit` passes.
  std::string read_until_closed(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string got;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return got;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return got;
      got.append(buf, static_cast<std::size_t>(n));
    }
  }

  // The status code of the answer read until the peer closes (0: none within `limit`).
  int status(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const std::string answer = read_until_closed(limit);
    if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12) return 0;
    return std::stoi(answer.substr(9, 3));
  }

  // Whether the peer has closed or reset the connection (or sent anything), without waiting.
  bool peer_spoke() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace crucible::test

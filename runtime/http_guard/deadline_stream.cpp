#include "http_guard/deadline_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace crucible::http_guard {

namespace {

// Waits up to `timeout` for `events` (or for the peer to close or fail, which the next call then reports).
bool wait_for(socket_t sock, short events, std::chrono::milliseconds timeout) {
  pollfd p{sock, events, 0};
  const int ms = static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, timeout.count()));
  int ready;
  do ready = ::poll(&p, 1, ms);
  while (ready < 0 && errno == EINTR);
  return ready > 0;
}

void numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST] = "", service[NI_MAXSERV] = "";
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(service);
}

}  // namespace

bool DeadlineStream::is_readable() const {
  if (buffered_begin_ < buffered_end_) return true;
  return wait_for(sock_, POLLIN,
                  std::chrono::duration_cast<std::chrono::milliseconds>(read_deadline_ - Clock::now()));
}

bool DeadlineStream::is_writable() const { return wait_for(sock_, POLLOUT, write_timeout_); }

ssize_t DeadlineStream::read(char* ptr, size_t size) {
  if (buffered_begin_ == buffered_end_) {
    if (!is_readable()) return -1;
    ssize_t n;
    do n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    buffered_begin_ = 0;
    buffered_end_ = static_cast<std::size_t>(n);
  }
  const std::size_t n = std::min(size, buffered_end_ - buffered_begin_);
  std::memcpy(ptr, buffer_.data() + buffered_begin_, n);
  buffered_begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t DeadlineStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

void DeadlineStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) numeric_address(addr, len, ip, port);
}

void DeadlineStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) numeric_address(addr, len, ip, port);
}

std::string peer_address(socket_t sock) {
  std::string ip;
  int port = 0;
  DeadlineStream(sock, DeadlineStream::Clock::now(), std::chrono::milliseconds(0)).get_remote_ip_and_port(ip, port);
  return ip;
}

}  // namespace crucible::http_guard

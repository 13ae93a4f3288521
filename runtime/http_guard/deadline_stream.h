#pragma once
// A server connection's socket as cpp-httplib's Stream, where the whole request (line, headers, body) must arrive
// before one deadline. cpp-httplib's own stream times out only each read, so a client that sends a header line
// every few seconds would hold its thread for ever.
#include <httplib.h>

#include <array>
#include <chrono>

namespace crucible::http_guard {

class DeadlineStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  // `write_timeout`: how long one write may wait for a client that reads nothing.
  DeadlineStream(socket_t sock, Clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : sock_(sock), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }
  using httplib::Stream::write;

 private:
  socket_t sock_;
  Clock::time_point read_deadline_;
  std::chrono::milliseconds write_timeout_;
  // cpp-httplib reads a request's head a byte at a time: one recv fills this instead of one per byte.
  std::array<char, 4096> buffer_{};
  std::size_t buffered_begin_ = 0, buffered_end_ = 0;
};

// The peer's numeric address ("127.0.0.1", "::1"), empty when the socket has none.
std::string peer_address(socket_t sock);

}  // namespace crucible::http_guard

#pragma once
// How many connections a server holds at once, in all and per client address, so that a few clients that open many
// connections and send slowly cannot take every thread the server has.
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace crucible::http_guard {

struct ConnectionLimits {
  std::size_t max_connections = 32;  // held at once, all clients together
  std::size_t max_per_client = 16;   // held at once by one client address
};

class ConnectionCounter {
 public:
  explicit ConnectionCounter(ConnectionLimits limits) : limits_(limits) {}
  // Counts the connection in and returns true, or returns false (counting nothing) when it would pass a limit.
  bool try_admit(const std::string& client);
  // Counts out a connection try_admit let in.
  void release(const std::string& client);
  std::size_t held() const;
  std::size_t held_by(const std::string& client) const;

 private:
  ConnectionLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, std::size_t> by_client_;
  std::size_t held_ = 0;
};

}  // namespace crucible::http_guard

#include "http_guard/connection_limits.h"

namespace crucible::http_guard {

bool ConnectionCounter::try_admit(const std::string& client) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t& mine = by_client_[client];
  if (held_ >= limits_.max_connections || mine >= limits_.max_per_client) {
    if (mine == 0) by_client_.erase(client);
    return false;
  }
  ++mine;
  ++held_;
  return true;
}

void ConnectionCounter::release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_client_.find(client);
  if (it == by_client_.end()) return;
  if (--it->second == 0) by_client_.erase(it);
  --held_;
}

std::size_t ConnectionCounter::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

std::size_t ConnectionCounter::held_by(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second;
}

}  // namespace crucible::http_guard

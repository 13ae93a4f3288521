#pragma once
// An evaluator node's log lines on their way to the run: the logging facade adds them (any thread), each heartbeat
// takes a batch, and a batch whose heartbeat failed goes back to the front. Bounded: past `capacity` the oldest
// lines are dropped, so a node cut off for hours cannot run out of memory.
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

#include "messages/cluster.h"

namespace crucible::node {

class LogOutbox {
 public:
  explicit LogOutbox(std::size_t capacity = 100000) : capacity_(capacity) {}

  void add(std::string component, std::string text) {
    std::lock_guard lock(mutex_);
    lines_.push_back({std::move(component), std::move(text)});
    trim();
  }
  std::vector<messages::LogLine> take(std::size_t max) {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::min(max, lines_.size());
    std::vector<messages::LogLine> out(std::make_move_iterator(lines_.begin()),
                                       std::make_move_iterator(lines_.begin() + static_cast<std::ptrdiff_t>(n)));
    lines_.erase(lines_.begin(), lines_.begin() + static_cast<std::ptrdiff_t>(n));
    return out;
  }
  void put_back(std::vector<messages::LogLine> lines) {
    std::lock_guard lock(mutex_);
    lines_.insert(lines_.begin(), std::make_move_iterator(lines.begin()), std::make_move_iterator(lines.end()));
    trim();
  }
 private:
  void trim() {
    while (lines_.size() > capacity_) lines_.pop_front();
  }
  std::mutex mutex_;
  std::deque<messages::LogLine> lines_;
  std::size_t capacity_;
};

}  // namespace crucible::node

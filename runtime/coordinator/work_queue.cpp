#include "coordinator/work_queue.h"

#include <algorithm>

namespace crucible::coordinator {

Decisions CompileQueue::offer(UnitIndex unit, CandidateId candidate) {
  queue_[{unit, candidate}] = true;
  return dispatch();
}

Decisions CompileQueue::pull(EvaluatorId worker) {
  if (closed_) return {{}, {{worker, Refusal::run_over}}, {}};
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), worker), waiting_.end());  // a repeated pull
  waiting_.push_back(worker);
  return dispatch();
}

Decisions CompileQueue::close() {
  closed_ = true;
  Decisions d;
  for (EvaluatorId w : waiting_) d.refuse.push_back({w, Refusal::run_over});
  waiting_.clear();
  return d;
}

Decisions CompileQueue::dispatch() {
  Decisions d;
  while (!waiting_.empty() && !queue_.empty()) {
    d.assign.push_back({waiting_.back(), queue_.begin()->first.second});
    waiting_.pop_back();
    queue_.erase(queue_.begin());
  }
  return d;
}

WorkQueue::WorkQueue() { nodes_[kLocalSession] = Node{"local", true}; }

void WorkQueue::join(SessionId session, const std::string& name) { nodes_[session] = Node{name, true}; }

bool WorkQueue::live(SessionId session) const {
  auto it = nodes_.find(session);
  return it != nodes_.end() && it->second.live;
}

std::string WorkQueue::node_name(SessionId session) const {
  auto it = nodes_.find(session);
  return it == nodes_.end() ? std::string() : it->second.name;
}

std::optional<CandidateId> WorkQueue::held_by(EvaluatorId evaluator) const {
  auto it = holding_.find(evaluator);
  if (it == holding_.end()) return std::nullopt;
  return it->second.candidate;
}

Decisions WorkQueue::offer(UnitIndex unit, CandidateId candidate, std::size_t source_hash) {
  known_[candidate] = {unit, source_hash};
  queue_[{unit, candidate}] = source_hash;
  return dispatch();
}

Decisions WorkQueue::offer(UnitIndex unit, const std::vector<std::pair<CandidateId, std::size_t>>& candidates) {
  for (const auto& [candidate, source_hash] : candidates) {
    known_[candidate] = {unit, source_hash};
    queue_[{unit, candidate}] = source_hash;
  }
  return dispatch();
}

Decisions WorkQueue::pull(EvaluatorId evaluator, SessionId session) {
  Decisions d;
  if (closed_) {
    d.refuse.push_back({evaluator, Refusal::run_over});
    return d;
  }
  if (!live(session)) {
    d.refuse.push_back({evaluator, Refusal::session_lost});
    return d;
  }
  // Verdicts come before the next pull on the same connection: one that pulls while holding never got its candidate.
  if (auto held = holding_.find(evaluator); held != holding_.end()) {
    const CandidateId c = held->second.candidate;
    holding_.erase(held);
    requeue(c, d);
  }
  forget_waiter(evaluator);
  waiters_.push_back({evaluator, session});
  return dispatch(std::move(d));
}

VerdictCheck WorkQueue::verdict(EvaluatorId evaluator, CandidateId candidate) {
  auto held = holding_.find(evaluator);
  if (held == holding_.end() || held->second.candidate != candidate) return {false, kLocalSession};
  const SessionId session = held->second.session;
  holding_.erase(held);
  known_.erase(candidate);
  return {true, session};
}

Decisions WorkQueue::evaluator_down(EvaluatorId evaluator) {
  Decisions d;
  forget_waiter(evaluator);
  if (auto held = holding_.find(evaluator); held != holding_.end()) {
    const CandidateId c = held->second.candidate;
    holding_.erase(held);
    requeue(c, d);
  }
  return dispatch(std::move(d));
}

Decisions WorkQueue::node_lost(SessionId session) {
  Decisions d;
  auto node = nodes_.find(session);
  if (node == nodes_.end() || !node->second.live) return d;
  node->second.live = false;
  for (auto it = holding_.begin(); it != holding_.end();) {
    if (it->second.session != session) {
      ++it;
      continue;
    }
    const CandidateId c = it->second.candidate;
    it = holding_.erase(it);
    requeue(c, d);
  }
  for (const auto& w : waiters_)
    if (w.session == session) d.refuse.push_back({w.evaluator, Refusal::session_lost});
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.session == session; }),
                 waiters_.end());
  return dispatch(std::move(d));
}

Decisions WorkQueue::close() {
  closed_ = true;
  Decisions d;
  for (const auto& w : waiters_) d.refuse.push_back({w.evaluator, Refusal::run_over});
  waiters_.clear();
  return d;
}

void WorkQueue::requeue(CandidateId candidate, Decisions& d) {
  auto it = known_.find(candidate);
  if (it == known_.end()) return;  // judged meanwhile
  queue_[{it->second.first, candidate}] = it->second.second;
  d.requeued.push_back(candidate);
}

void WorkQueue::forget_waiter(EvaluatorId evaluator) {
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(),
                                [&](const Waiter& w) { return w.evaluator == evaluator; }),
                 waiters_.end());
}

// Among the oldest few: one whose source this session was handed before (its cache has the build), else one no
// other live session has, else the oldest.
std::map<WorkQueue::Key, std::size_t>::iterator WorkQueue::pick_for(SessionId session) {
  const auto& mine = handed_[session];
  auto unclaimed = queue_.end();
  int scanned = 0;
  for (auto it = queue_.begin(); it != queue_.end() && scanned < kWindow; ++it, ++scanned) {
    const std::size_t h = it->second;
    if (mine.count(h)) return it;
    if (unclaimed != queue_.end()) continue;
    bool claimed = false;
    for (const auto& [other, hashes] : handed_)
      if (other != session && live(other) && hashes.count(h)) claimed = true;
    if (!claimed) unclaimed = it;
  }
  return unclaimed != queue_.end() ? unclaimed : queue_.begin();
}

Decisions WorkQueue::dispatch(Decisions d) {
  while (!waiters_.empty() && !queue_.empty()) {
    const Waiter w = waiters_.back();
    waiters_.pop_back();
    auto chosen = pick_for(w.session);
    const CandidateId c = chosen->first.second;
    handed_[w.session].insert(chosen->second);
    holding_[w.evaluator] = Holding{c, w.session};
    queue_.erase(chosen);
    d.assign.push_back({w.evaluator, c});
  }
  return d;
}

}  // namespace crucible::coordinator

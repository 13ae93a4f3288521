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

Decisions WorkQueue::offer(UnitIndex unit, const Offered& candidate) {
  enqueue(unit, candidate);
  return dispatch();
}

Decisions WorkQueue::offer(UnitIndex unit, const std::vector<Offered>& candidates) {
  for (const auto& c : candidates) enqueue(unit, c);
  return dispatch();
}

void WorkQueue::enqueue(UnitIndex unit, const Offered& c) {
  known_[c.candidate] = {unit, c};
  queue_[{unit, c.candidate}] = c;
  lots_[{unit, c.task}].insert({unit, c.candidate});
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
  pulled_.insert(session);
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
  handed_.erase(session);
  warm_.erase(session);
  pulled_.erase(session);
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
  enqueue(it->second.first, it->second.second);
  d.requeued.push_back(candidate);
}

void WorkQueue::forget_waiter(EvaluatorId evaluator) {
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(),
                                [&](const Waiter& w) { return w.evaluator == evaluator; }),
                 waiters_.end());
}

bool WorkQueue::claimed_by_another(std::size_t source_hash, SessionId session) {
  for (const auto& [other, hashes] : handed_)
    if (other != session && live(other) && hashes.count(source_hash)) return true;
  return false;
}

std::size_t WorkQueue::warm_in_others(std::size_t task, SessionId session) {
  std::size_t n = 0;
  for (const auto& [other, tasks] : warm_) n += other != session && live(other) && tasks.count(task);
  return n;
}

// A lot's oldest candidate whose source no other node built, else its oldest.
std::map<WorkQueue::Key, Offered>::iterator WorkQueue::pick_in_lot(const std::set<Key>& lot, SessionId session) {
  for (const Key& k : lot) {
    auto it = queue_.find(k);
    if (!claimed_by_another(it->second.source_hash, session)) return it;
  }
  return queue_.find(*lot.begin());
}

// In order of preference:
// 1. among the oldest few, a source this session was handed before (its cache has the build);
// 2. among the oldest lots (one per node that pulls), one of a task this session was given before (its evaluator
//    holds the task's input pools and reference timing);
// 3. among those lots, one of the task the fewest other nodes were given (none, where there is one), so that nodes
//    warm different tasks, and with more nodes than tasks the same number of nodes warm each.
// Within a lot, its oldest candidate whose source no other node has, else its oldest.
// Looking at only as many lots as there are nodes keeps units nearly in order: with one node, the oldest lot first.
// The oldest candidate goes first once kWindow picks in a row have passed over it.
std::map<WorkQueue::Key, Offered>::iterator WorkQueue::pick_for(SessionId session) {
  if (queue_.begin()->first != head_) {
    head_ = queue_.begin()->first;
    head_passed_ = 0;
  }
  if (head_passed_ >= kWindow) return queue_.begin();
  const auto& mine = handed_[session];
  int scanned = 0;
  for (auto it = queue_.begin(); it != queue_.end() && scanned < kWindow; ++it, ++scanned)
    if (mine.count(it->second.source_hash)) return it;

  struct OldLot {
    Key first;  // its oldest candidate
    std::size_t task;
    const std::set<Key>* keys;
  };
  std::vector<OldLot> oldest;
  for (const auto& [lot, keys] : lots_) oldest.push_back({*keys.begin(), lot.second, &keys});
  std::size_t nodes = 0;
  for (SessionId s : pulled_) nodes += live(s);
  const std::size_t considered = std::min(oldest.size(), std::max<std::size_t>(nodes, 1));
  std::partial_sort(oldest.begin(), oldest.begin() + static_cast<std::ptrdiff_t>(considered), oldest.end(),
                    [](const OldLot& a, const OldLot& b) { return a.first < b.first; });
  oldest.resize(considered);
  const auto& warm = warm_[session];
  for (const auto& lot : oldest)
    if (warm.count(lot.task)) return pick_in_lot(*lot.keys, session);
  // min_element keeps the first of equals: the oldest.
  const auto least = std::min_element(oldest.begin(), oldest.end(), [&](const OldLot& a, const OldLot& b) {
    return warm_in_others(a.task, session) < warm_in_others(b.task, session);
  });
  return least == oldest.end() ? queue_.begin() : pick_in_lot(*least->keys, session);
}

void WorkQueue::take(std::map<Key, Offered>::iterator it) {
  auto lot = lots_.find({it->first.first, it->second.task});
  lot->second.erase(it->first);
  if (lot->second.empty()) lots_.erase(lot);
  queue_.erase(it);
}

Decisions WorkQueue::dispatch(Decisions d) {
  while (!waiters_.empty() && !queue_.empty()) {
    const Waiter w = waiters_.back();
    waiters_.pop_back();
    auto chosen = pick_for(w.session);
    if (chosen != queue_.begin()) ++head_passed_;
    const CandidateId c = chosen->first.second;
    handed_[w.session].insert(chosen->second.source_hash);
    warm_[w.session].insert(chosen->second.task);
    holding_[w.evaluator] = Holding{c, w.session};
    take(chosen);
    d.assign.push_back({w.evaluator, c});
  }
  return d;
}

}  // namespace crucible::coordinator

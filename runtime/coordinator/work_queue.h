#pragma once
// The coordinator's work queues, without CAF: candidates waiting to be compiled or evaluated, the evaluators
// waiting for work, what each evaluator holds, and the nodes (sessions) evaluators pull under. Every event returns
// what the actor must do (hand candidate c to evaluator e, refuse a waiting pull, re-queue), so each ordering can be
// tested by a table of events and expected decisions. The actor keeps only the mapping from ids to promises and
// handles.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace crucible::coordinator {

using CandidateId = uint64_t;
using EvaluatorId = uint64_t;  // the actor's own numbering of the evaluators (and compile workers) that pull
using SessionId = uint64_t;    // a node's session; kLocalSession: the coordinator's own node
using UnitIndex = std::size_t;

constexpr SessionId kLocalSession = 0;

struct Assignment {
  EvaluatorId evaluator = 0;
  CandidateId candidate = 0;
  friend bool operator==(const Assignment& a, const Assignment& b) {
    return a.evaluator == b.evaluator && a.candidate == b.candidate;
  }
};

// Why a waiting pull is answered without work.
enum class Refusal { run_over, session_lost };

struct Refused {
  EvaluatorId evaluator = 0;
  Refusal why = Refusal::run_over;
  friend bool operator==(const Refused& a, const Refused& b) { return a.evaluator == b.evaluator && a.why == b.why; }
};

// What the actor does after an event: deliver these, refuse those, and note what was queued again.
struct Decisions {
  std::vector<Assignment> assign;
  std::vector<Refused> refuse;
  std::vector<CandidateId> requeued;
};

// A candidate ready for evaluation, with what the hand-out weighs: `source_hash` (a node whose cache built the same
// source builds it for free) and `task` (a node that evaluated the task holds its input pools and reference timing).
struct Offered {
  CandidateId candidate = 0;
  std::size_t source_hash = 0;
  std::size_t task = 0;
};

// A verdict's fate: counted (it came from the evaluator that holds the candidate) or discarded (a late result from
// an evaluator the candidate was taken from, or a duplicate).
struct VerdictCheck {
  bool accepted = false;
  SessionId session = kLocalSession;  // of the evaluator that sent it, when accepted
};

// Candidates waiting for the compiler pool: the oldest unit's first, handed to whichever worker asks.
class CompileQueue {
 public:
  Decisions offer(UnitIndex unit, CandidateId candidate);
  Decisions pull(EvaluatorId worker);
  Decisions close();  // the run is over: every waiting worker is refused
  std::size_t queued() const { return queue_.size(); }

 private:
  Decisions dispatch();
  std::map<std::pair<UnitIndex, CandidateId>, bool> queue_;
  std::vector<EvaluatorId> waiting_;
  bool closed_ = false;
};

class WorkQueue {
 public:
  // How far down the queue the cache-affine pick looks: units stay in order, only the oldest few are reordered.
  static constexpr int kWindow = 64;

  WorkQueue();  // with the local session live

  // A node that proved the secret; its evaluators may pull under `session`.
  void join(SessionId session, const std::string& name);
  bool live(SessionId session) const;
  std::string node_name(SessionId session) const;  // "" for an unknown session

  // A candidate ready for evaluation (compiled here, or to be compiled where it runs).
  Decisions offer(UnitIndex unit, const Offered& candidate);
  // A whole group at once, then one hand-out: waiting evaluators choose among all of it, so a repeated source still
  // goes to the node whose cache built it even when evaluators were idle as the group arrived.
  Decisions offer(UnitIndex unit, const std::vector<Offered>& candidates);

  // An evaluator of `session` is free. An evaluator that pulls while it still holds a candidate never got it (its
  // pull timed out as the candidate was on its way): that candidate is queued again. A pull from a session that is
  // not live is refused (session_lost), as is any pull once the queue is closed (run_over).
  Decisions pull(EvaluatorId evaluator, SessionId session);

  // A verdict for `candidate` from `evaluator`: accepted only from the evaluator that holds it.
  VerdictCheck verdict(EvaluatorId evaluator, CandidateId candidate);

  // An evaluator's process or actor is gone: it waits no more, and what it held is queued again.
  Decisions evaluator_down(EvaluatorId evaluator);

  // A node's session ended: its evaluators' waiting pulls are refused (so they stop and the node joins again), and
  // every candidate they held is queued again.
  Decisions node_lost(SessionId session);

  // The run is over: waiting pulls are refused and every later pull too.
  Decisions close();

  std::size_t queued() const { return queue_.size(); }
  std::size_t waiting() const { return waiters_.size(); }
  std::optional<CandidateId> held_by(EvaluatorId evaluator) const;

 private:
  struct Node {
    std::string name;
    bool live = true;
  };
  struct Waiter {
    EvaluatorId evaluator = 0;
    SessionId session = 0;
  };
  struct Holding {
    CandidateId candidate = 0;
    SessionId session = 0;
  };
  using Key = std::pair<UnitIndex, CandidateId>;
  using Lot = std::pair<UnitIndex, std::size_t>;  // one unit's candidates of one task

  Decisions dispatch(Decisions d = {});
  void enqueue(UnitIndex unit, const Offered& c);
  std::map<Key, Offered>::iterator pick_for(SessionId session);
  std::map<Key, Offered>::iterator pick_in_lot(const std::set<Key>& lot, SessionId session);
  bool claimed_by_another(std::size_t source_hash, SessionId session);
  std::size_t warm_in_others(std::size_t task, SessionId session);  // live nodes but this one given the task
  void take(std::map<Key, Offered>::iterator it);
  void requeue(CandidateId candidate, Decisions& d);
  void forget_waiter(EvaluatorId evaluator);

  std::map<Key, Offered> queue_;
  std::map<Lot, std::set<Key>> lots_;  // the queue again, by unit and task
  std::map<CandidateId, std::pair<UnitIndex, Offered>> known_;  // every candidate offered and not yet judged
  std::vector<Waiter> waiters_;
  std::map<EvaluatorId, Holding> holding_;
  std::map<SessionId, Node> nodes_;
  std::set<SessionId> pulled_;  // sessions whose evaluators have pulled: the ones work is spread over
  // The oldest queued candidate, and how many picks in a row passed over it: after kWindow it goes next, so tasks a
  // node keeps to never hold back an older one for good.
  Key head_{};
  int head_passed_ = 0;
  std::map<SessionId, std::unordered_set<std::size_t>> handed_;  // source hashes each session was given
  std::map<SessionId, std::unordered_set<std::size_t>> warm_;    // tasks each session was given
  bool closed_ = false;
};

}  // namespace crucible::coordinator

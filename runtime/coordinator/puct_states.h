#pragma once
// PUCT state reuse across a run: per task, the archive of evaluated states (search::PuctArchive), and what each
// state was (the candidate and its verdict, whatever type the caller keeps), held past its unit's commit so later
// units (ttt's next steps) can improve on it. A candidate's parent is the state its parent candidate became: a
// duplicate merges into the state already held, so its children count there.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/puct_archive.h"

namespace crucible::coordinator {

// What the archive needs of one evaluated candidate.
struct EvaluatedState {
  uint64_t id = 0;
  int64_t parent = -1;  // the candidate it refined; -1: a fresh sample
  std::string task;
  std::string code;     // its source, or its whole reply when it had none (so duplicate replies merge)
  double reward = 0;
  bool policy_error = false;  // no sample at all: the server failed, not the state (neither a state nor a visit)
};

class PuctBook {
 public:
  explicit PuctBook(search::PuctOptions options) : options_(options) {}
  // Adds it to its task's archive; true when it became a new state (not a duplicate, not a policy error).
  bool add(const EvaluatedState& state);
  // Up to n states of the task to improve on; none before the task has any.
  std::vector<uint64_t> choose(const std::string& task, uint32_t n);
  // The state a candidate became (itself, or the duplicate held); none for one never added.
  std::optional<uint64_t> state_of(uint64_t candidate) const;

 private:
  search::PuctOptions options_;
  std::map<std::string, search::PuctArchive> archives_;
  std::map<uint64_t, uint64_t> state_of_;
};

// The book, with what each state was.
template <class State>
class PuctStates {
 public:
  explicit PuctStates(search::PuctOptions options) : book_(options) {}
  void add(const EvaluatedState& evaluated, const State& state) {
    if (book_.add(evaluated)) states_.emplace(evaluated.id, state);
  }
  std::vector<const State*> choose(const std::string& task, uint32_t n) {
    std::vector<const State*> out;
    for (uint64_t id : book_.choose(task, n)) out.push_back(&states_.at(id));
    return out;
  }

 private:
  PuctBook book_;
  std::map<uint64_t, State> states_;
};

}  // namespace crucible::coordinator

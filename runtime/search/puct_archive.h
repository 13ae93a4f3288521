#pragma once
// Search over states (TTT-Discover's state reuse): per task, an archive of evaluated kernels, deduplicated by code,
// each with the lineage it came from. The next kernels to improve on are chosen by a PUCT score,
//   score(s) = Q(s) + c * P(s) * sqrt(1 + T) / (1 + n(s)),
// Q(s) the best reward in s's subtree (s and every kernel refined from it, transitively) over the archive's best,
// P(s) a rank prior (the k-th best of N states has weight N - k, normalised), T the expansions so far and n(s) the
// expansions through s (a child of s or of any descendant evaluated, failed children included).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crucible::search {

struct PuctOptions {
  double c = 1.0;  // exploration weight
};

class PuctArchive {
 public:
  explicit PuctArchive(PuctOptions options = {}) : options_(options) {}

  // An evaluated kernel: `id` names it (a candidate id), `parent` the state it refined (none for a fresh sample),
  // `code` decides duplicates. A duplicate of a state already held adds no state: its reward raises the held one's
  // if higher, and the expansion still counts along the parent's lineage. Returns the id of the state it is now.
  uint64_t add(uint64_t id, std::optional<uint64_t> parent, const std::string& code, double reward);

  // The k states to expand next, best score first. Each pick counts as a provisional expansion of its lineage, so
  // the next pick in the same call spreads out; the provisional counts are undone before returning (add() records
  // the real ones when the children come back). Empty when the archive is.
  std::vector<uint64_t> choose(std::size_t k) const;

  double score(uint64_t id) const;
  std::size_t size() const { return states_.size(); }
  std::size_t visits(uint64_t id) const { return states_.at(id).visits; }
  std::size_t expansions() const { return expansions_; }
  double best_in_subtree(uint64_t id) const { return states_.at(id).subtree_best; }
  bool contains(uint64_t id) const { return states_.count(id) > 0; }

 private:
  struct State {
    std::optional<uint64_t> parent;
    double reward = 0.0;
    double subtree_best = 0.0;
    std::size_t visits = 0;
  };
  double score_with(uint64_t id, const std::map<uint64_t, std::size_t>& extra, std::size_t extra_total) const;
  void count_expansion(std::optional<uint64_t> parent);
  void raise_subtree_best(uint64_t id, double reward);

  PuctOptions options_;
  std::map<uint64_t, State> states_;
  std::map<std::string, uint64_t> by_code_;
  std::size_t expansions_ = 0;
};

}  // namespace crucible::search

#include "search/puct_archive.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace crucible::search {

uint64_t PuctArchive::add(uint64_t id, std::optional<uint64_t> parent, const std::string& code, double reward) {
  if (parent && !states_.count(*parent)) parent.reset();  // a parent from before a resume: a fresh root
  count_expansion(parent);
  if (auto same = by_code_.find(code); same != by_code_.end()) {
    auto& held = states_.at(same->second);
    if (reward > held.reward) held.reward = reward, raise_subtree_best(same->second, reward);
    return same->second;
  }
  if (states_.count(id)) throw std::invalid_argument("puct archive: state " + std::to_string(id) + " added twice");
  State s;
  s.parent = parent;
  s.reward = s.subtree_best = reward;
  states_.emplace(id, s);
  by_code_.emplace(code, id);
  raise_subtree_best(id, reward);
  return id;
}

void PuctArchive::count_expansion(std::optional<uint64_t> parent) {
  ++expansions_;
  for (auto at = parent; at; at = states_.at(*at).parent) ++states_.at(*at).visits;
}

void PuctArchive::raise_subtree_best(uint64_t id, double reward) {
  for (std::optional<uint64_t> at = id; at; at = states_.at(*at).parent) {
    auto& s = states_.at(*at);
    s.subtree_best = std::max(s.subtree_best, reward);
  }
}

double PuctArchive::score_with(uint64_t id, const std::map<uint64_t, std::size_t>& extra,
                               std::size_t extra_total) const {
  const auto& s = states_.at(id);
  double top = 0.0;
  for (const auto& [other, st] : states_) top = std::max(top, st.reward);
  const double q = top > 0.0 ? s.subtree_best / top : 0.0;
  // Rank prior: states ordered by reward (ties by id, older first); the best of N weighs N, the worst 1.
  std::size_t better = 0;
  for (const auto& [other, st] : states_)
    if (st.reward > s.reward || (st.reward == s.reward && other < id)) ++better;
  const double n = static_cast<double>(states_.size());
  const double prior = (n - static_cast<double>(better)) / (n * (n + 1) / 2);
  auto more = extra.find(id);
  const double visits = static_cast<double>(s.visits + (more == extra.end() ? 0 : more->second));
  const double total = static_cast<double>(expansions_ + extra_total);
  return q + options_.c * prior * std::sqrt(1.0 + total) / (1.0 + visits);
}

double PuctArchive::score(uint64_t id) const { return score_with(id, {}, 0); }

std::vector<uint64_t> PuctArchive::choose(std::size_t k) const {
  std::vector<uint64_t> out;
  if (states_.empty()) return out;
  std::map<uint64_t, std::size_t> provisional;
  for (std::size_t pick = 0; pick < k; ++pick) {
    uint64_t best = states_.begin()->first;
    double best_score = -1e300;
    for (const auto& [id, s] : states_) {
      const double v = score_with(id, provisional, pick);
      if (v > best_score) best = id, best_score = v;  // ties: the lower id (the older state)
    }
    out.push_back(best);
    for (std::optional<uint64_t> at = best; at; at = states_.at(*at).parent) ++provisional[*at];
  }
  return out;
}

}  // namespace crucible::search

#pragma once
// Messages from the reward normalizer to the optimizer, and the optimizer's announcement of a new policy.
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <vector>

namespace crucible::messages {

struct ScoredSample {
  uint64_t candidate_id = 0;
  uint64_t policy_version = 0;  // the version that sampled it: the optimizer bounds staleness with it
  double reward = 0.0;
  double advantage = 0.0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScoredSample& x) {
  return f(caf::meta::type_name("crucible.ScoredSample"), x.candidate_id, x.policy_version, x.reward, x.advantage);
}

struct TrainBatch {
  uint64_t step = 0;
  std::vector<ScoredSample> samples;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainBatch& x) {
  return f(caf::meta::type_name("crucible.TrainBatch"), x.step, x.samples);
}

struct PolicyPublished {
  uint64_t version = 0;
  uint64_t step = 0;
  double update_seconds = 0.0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PolicyPublished& x) {
  return f(caf::meta::type_name("crucible.PolicyPublished"), x.version, x.step, x.update_seconds);
}

}  // namespace crucible::messages

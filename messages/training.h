#pragma once
// Messages from the coordinator to the optimizer, and the optimizer's announcement of a new policy.
#include <caf/meta/type_name.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "candidate.h"
#include "policy/update_metrics.h"

namespace crucible::policy {

// CAF 0.17 inspects its own optional, not std::optional: kl crosses as a caf::optional copy.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UpdateMetrics& x) {
  auto kl = x.kl ? caf::optional<double>(*x.kl) : caf::optional<double>();
  auto load = [&] {
    if (kl) x.kl = *kl;
    else x.kl.reset();
    return caf::error{};
  };
  return f(caf::meta::type_name("crucible.UpdateMetrics"), x.adapter, x.loss, kl, x.entropy, x.clip_fraction,
           x.grad_norm, x.sequences, x.tokens, x.dropped_sequences, x.distill_kl, x.taught_sequences,
           caf::meta::load_callback(load));
}

}  // namespace crucible::policy

namespace crucible::messages {

// The samples as they were generated (SDPO: each with its teacher's context), and one advantage per sample.
struct TrainBatch {
  std::string unit;  // the run directory's unit of work this batch ends
  uint64_t step = 0;
  std::vector<policy::Sample> samples;
  std::vector<double> advantages;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainBatch& x) {
  return f(caf::meta::type_name("crucible.TrainBatch"), x.unit, x.step, x.samples, x.advantages);
}

// A new policy version: generators restore the snapshot, so they may live on another node.
struct PolicyPublished {
  uint64_t version = 0;
  uint64_t step = 0;
  double update_seconds = 0.0;
  std::string snapshot;
  std::vector<policy::UpdateMetrics> metrics;  // empty when the policy measures nothing
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PolicyPublished& x) {
  return f(caf::meta::type_name("crucible.PolicyPublished"), x.version, x.step, x.update_seconds, x.snapshot,
           x.metrics);
}

}  // namespace crucible::messages

#pragma once
// kernels_eval's values as they cross between actors and nodes: a device, and what a run asks of every evaluation
// (the experiment's [eval] settings). Their inspect functions live here, in the types' own namespace, so kernels_eval
// needs no CAF.
#include <caf/meta/type_name.hpp>

#include "crucible/eval/eval_settings.h"

namespace crucible::eval {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Device& x) {
  return f(caf::meta::type_name("crucible.Device"), x.backend, x.index);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunEvalSettings& x) {
  return f(caf::meta::type_name("crucible.RunEvalSettings"), x.backend, x.kind, x.mode, x.launches, x.sizes,
           x.correctness_trials, x.timing_trials, x.call_timeout_s, x.evaluation_budget_s, x.forbid_torch_ops);
}

}  // namespace crucible::eval

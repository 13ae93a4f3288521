#pragma once
// What a policy update measured: written with the unit's metrics, and carried from the optimizer to the record as
// this one type (its serialization lives in messages/).
#include <cstdint>
#include <optional>
#include <string>

namespace crucible::policy {

// Per adapter (a language model's task under ttt; "" for the one shared adapter).
struct UpdateMetrics {
  std::string adapter;
  double loss = 0;
  std::optional<double> kl;  // policy vs base, per completion token; unset where it was not measured
  double entropy = 0, clip_fraction = 0, grad_norm = 0;
  int64_t sequences = 0, tokens = 0, dropped_sequences = 0;
  double distill_kl = 0;         // SDPO: mean KL(student || teacher) per taught completion token
  int64_t taught_sequences = 0;  // SDPO: sequences that had a teacher
};

}  // namespace crucible::policy

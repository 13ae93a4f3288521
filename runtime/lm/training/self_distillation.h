#pragma once
// The self-distillation term of SDPO: the same model, reading the same completion after a prompt that also carries
// feedback (the teacher), gives next-token distributions the policy without that feedback (the student) is pulled
// towards. Per completion token: KL(student || teacher) over the whole vocabulary, with no gradient through the
// teacher. The teacher is the live policy (the adapter being trained), as in the paper's on-policy setting.
#include <ATen/core/Tensor.h>

#include <cstddef>

#include "lm/training/policy_loss.h"
#include "lm/model/transformer.h"

namespace crucible::lm {

struct DistillationTerms {
  at::Tensor per_token;  // [n, T - 1]: KL at each student position that predicts a completion token; 0 elsewhere
  at::Tensor taught;     // [n, 1] float: 1 for rows with a teacher prompt, 0 for the rest
};

// Rows [begin, end) of the batch; `student` holds the student's log-softmax over the vocabulary at every position
// ([n, T - 1, V], with autograd), for the rows packed as pack_rows packs them.
DistillationTerms self_distillation_terms(const Transformer& model, const SequenceBatch& batch, std::size_t begin,
                                          std::size_t end, const at::Tensor& student);

}  // namespace crucible::lm

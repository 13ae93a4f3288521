#include "lm/training/self_distillation.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace crucible::lm {

DistillationTerms self_distillation_terms(const Transformer& model, const SequenceBatch& batch, std::size_t begin,
                                          std::size_t end, const at::Tensor& student) {
  const auto device = student.device();
  const int64_t n = static_cast<int64_t>(end - begin), positions = student.size(1);
  auto taught = at::zeros({n, 1}, at::kFloat);
  // The teacher's rows: its own prompt, then the student's completion tokens.
  SequenceBatch teacher;
  std::vector<int64_t> row_of;  // student row of each teacher row
  for (int64_t r = 0; r < n; ++r) {
    const auto i = begin + static_cast<std::size_t>(r);
    if (i >= batch.teacher_prompts.size() || batch.teacher_prompts[i].empty()) continue;
    const auto& seq = batch.sequences[i];
    std::vector<int64_t> t = batch.teacher_prompts[i];
    t.insert(t.end(), seq.begin() + batch.prompt_lengths[i], seq.end());
    teacher.prompt_lengths.push_back(static_cast<int64_t>(batch.teacher_prompts[i].size()));
    teacher.sequences.push_back(std::move(t));
    row_of.push_back(r);
    taught[r][0] = 1.0f;
  }
  // Where a row has no teacher the aligned distribution is the student's own (detached): KL 0 there.
  auto aligned = student.detach().clone();
  if (!teacher.sequences.empty()) {
    at::NoGradGuard no_grad;
    const auto rows = pack_rows(teacher, 0, teacher.sequences.size(), device);
    const auto teacher_all = token_logprobs(model, rows.tokens, rows.valid, /*with_distribution=*/true).distribution;
    for (std::size_t k = 0; k < row_of.size(); ++k) {
      const auto i = begin + static_cast<std::size_t>(row_of[k]);
      const int64_t completion = static_cast<int64_t>(batch.sequences[i].size()) - batch.prompt_lengths[i];
      if (completion < 1) continue;
      const int64_t student_start = batch.prompt_lengths[i] - 1, teacher_start = teacher.prompt_lengths[k] - 1;
      if (student_start + completion > positions) throw std::invalid_argument("a completion runs past its packed row");
      aligned[row_of[k]].narrow(0, student_start, completion)
          .copy_(teacher_all[static_cast<int64_t>(k)].narrow(0, teacher_start, completion));
    }
  }
  const auto per_token = (student.exp() * (student - aligned)).sum(-1);
  return {per_token, taught.to(device)};
}

}  // namespace crucible::lm

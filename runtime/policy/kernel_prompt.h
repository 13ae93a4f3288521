#pragma once
// What a language-model policy is shown for a task, and how its reply becomes a candidate source. The template is
// documented in docs/lm.md ("Prompts and completions").
#include <optional>
#include <string>

#include "crucible/eval/candidate_language.h"
#include "crucible/eval/task_spec.h"
#include "policy/policy.h"

namespace crucible::policy {

// The user turn for a task: what to compute (description and the PyTorch-style reference), the tensors with their
// shapes and the sizes they will be evaluated at, the candidate contract header, and the reply format.
// `language`: C++, CUDA C++ or Triton (KernelBench candidates are asked for with kernelbench_prompt.h instead).
std::string kernel_prompt(const eval::TaskSpec& task, eval::CandidateLanguage language,
                          const std::string& contract_header);

// The user turn of a refinement (multi-turn, PUCT): the task's own text, then the previous attempt's code (its whole
// reply when it had no code block; cut to 16 KB) and the evaluator's feedback (docs/experiments.md).
std::string refinement_prompt(const eval::TaskSpec& task, eval::CandidateLanguage language,
                              const std::string& contract_header, const Attempt& attempt);

// The tag of a code block in the language: "cpp", "cuda" or "python".
std::string code_fence_tag(eval::CandidateLanguage language);

// Code shown inside a prompt: cut to 16 KB of valid UTF-8 and fenced for its language (```cpp, ```cuda or
// ```python).
std::string fenced_code(const std::string& code, eval::CandidateLanguage language);

// The candidate source in a reply: the last complete fenced code block (```cpp, ```c++, ```cuda, ```cu, ```c or
// unlabelled; for Python candidates, Triton and KernelBench, ```python, ```py or unlabelled). None when the reply has
// no complete block: an unterminated block (a reply cut by its token budget) does not count.
std::optional<std::string> extract_code(const std::string& reply,
                                        eval::CandidateLanguage language = eval::CandidateLanguage::cpp());

}  // namespace crucible::policy

#pragma once
// Which prompt a language-model policy shows for a task, and how its reply becomes a candidate source: Crucible's own
// (kernel_prompt.h: the task, its tensors and the candidate contract) or KernelBench's (kernelbench_prompt.h: the
// problem's source in KernelBench's words, answered by a ModelNew file). The in-process and the served model both
// ask one TaskPrompter, so they show the same text.
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "crucible/eval/candidate_language.h"
#include "crucible/eval/task_spec.h"
#include "policy/kernelbench_prompt.h"
#include "policy/policy.h"

namespace crucible::policy {

// [policy] prompt: "crucible" (for C++, CUDA C++ and Triton candidates) or "kernelbench" (for candidate =
// "kernelbench", whose answers are KernelBench's ModelNew files).
enum class PromptKind { crucible, kernelbench };

std::string_view prompt_kind_name(PromptKind kind);
// Throws std::invalid_argument naming the choices.
PromptKind parse_prompt_kind(std::string_view text);

struct PromptSettings {
  PromptKind kind = PromptKind::crucible;
  KernelBenchPromptOptions kernelbench;  // kind kernelbench: the checkout, KernelBench's backend and option
};

// A task this prompt cannot be built for (no KernelBench problem, a problem file that cannot be read); the message
// names the task.
class TaskPromptError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The KernelBench problem file a task stands for, as text. An imported task keeps it exactly as its reference source;
// a hand-written task that names its problem (`[kernelbench] problem = "level1/19_ReLU.py"`) has it read from the
// checkout's KernelBench/ folder. Throws TaskPromptError for a task that names no problem, or one not found there.
std::string kernelbench_problem_source(const eval::TaskSpec& task, const std::filesystem::path& kernelbench_dir);

class TaskPrompter {
 public:
  // `language` is what candidates are written in; Crucible's prompt needs the contract header (crucible/kernel.h).
  // Throws std::invalid_argument when the prompt does not fit the language: KernelBench's prompt asks for ModelNew
  // files, Crucible's for the others.
  TaskPrompter(PromptSettings settings, eval::CandidateLanguage language, std::string contract_header);

  // The user turn for a task. KernelBench's: throws TaskPromptError (no problem) or KernelBenchPromptError (the
  // checkout lacks what the prompt needs).
  std::string prompt(const eval::TaskSpec& task) const;
  // A refinement's user turn: the task's prompt, the previous attempt's code and the evaluator's feedback.
  std::string refinement(const eval::TaskSpec& task, const Attempt& attempt) const;
  // The candidate in a reply: its last complete code block in the candidates' language (```python for KernelBench).
  std::optional<std::string> code(const std::string& reply) const;

 private:
  PromptSettings settings_;
  eval::CandidateLanguage language_;
  std::string contract_header_;
};

}  // namespace crucible::policy

#include "policy/task_prompt.h"

#include <fstream>
#include <sstream>

#include "policy/kernel_prompt.h"

namespace crucible::policy {
namespace fs = std::filesystem;

namespace {

// A problem file is a page of Python; anything far larger is not one.
constexpr std::uintmax_t kMaxProblemBytes = 1 << 20;

// `[kernelbench] problem` as the importer writes it: level<N>/<file>.py, relative, never leaving the checkout.
bool plain_problem_path(const std::string& problem) {
  const fs::path p(problem);
  if (problem.empty() || p.is_absolute() || p.extension() != ".py") return false;
  for (const auto& part : p)
    if (part == ".." || part == ".") return false;
  return true;
}

std::string read_problem_file(const eval::TaskSpec& task, const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw TaskPromptError("task '" + task.name + "': its KernelBench problem is not in the checkout (no file " +
                          file.string() + ")");
  if (fs::file_size(file, ec) > kMaxProblemBytes)
    throw TaskPromptError("task '" + task.name + "': " + file.string() + " is larger than a problem file (1 MiB)");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw TaskPromptError("task '" + task.name + "': cannot read " + file.string());
  return text.str();
}

}  // namespace

std::string_view prompt_kind_name(PromptKind kind) {
  return kind == PromptKind::kernelbench ? "kernelbench" : "crucible";
}

PromptKind parse_prompt_kind(std::string_view text) {
  if (text == "crucible") return PromptKind::crucible;
  if (text == "kernelbench") return PromptKind::kernelbench;
  throw std::invalid_argument("unknown prompt '" + std::string(text) + "' (crucible, kernelbench)");
}

std::string kernelbench_problem_source(const eval::TaskSpec& task, const fs::path& kernelbench_dir) {
  const auto problem = task.origin.find("problem");
  if (problem == task.origin.end())
    throw TaskPromptError("task '" + task.name + "' names no KernelBench problem ([kernelbench] problem): KernelBench's "
                          "prompt is built around the problem's source; import the problem (crucible tasks import "
                          "--kernelbench) or name it in the task");
  // The importer writes the problem file, unchanged, as the reference source of the TorchScript reference it traced.
  if (task.reference == "torchscript" && !task.reference_source.empty()) return task.reference_source;
  if (!plain_problem_path(problem->second))
    throw TaskPromptError("task '" + task.name + "': [kernelbench] problem '" + problem->second +
                          "' is not a path such as level1/19_ReLU.py");
  return read_problem_file(task, kernelbench_dir / "KernelBench" / problem->second);
}

TaskPrompter::TaskPrompter(PromptSettings settings, eval::CandidateLanguage language, std::string contract_header)
    : settings_(std::move(settings)), language_(language), contract_header_(std::move(contract_header)) {
  const bool kernelbench_answers = language_.kind == eval::CandidateKind::kernelbench;
  if (settings_.kind == PromptKind::kernelbench && !kernelbench_answers)
    throw std::invalid_argument("KernelBench's prompt asks for a ModelNew file: candidates must be of kind "
                                "kernelbench, not " + std::string(language_.name()));
  if (settings_.kind == PromptKind::crucible && kernelbench_answers)
    throw std::invalid_argument("KernelBench-format candidates are asked for with KernelBench's prompt "
                                "(prompt = \"kernelbench\")");
}

std::string TaskPrompter::prompt(const eval::TaskSpec& task) const {
  if (settings_.kind == PromptKind::crucible) return kernel_prompt(task, language_, contract_header_);
  return kernelbench_prompt(kernelbench_problem_source(task, settings_.kernelbench.kernelbench_dir),
                            settings_.kernelbench);
}

std::string TaskPrompter::refinement(const eval::TaskSpec& task, const Attempt& attempt) const {
  if (settings_.kind == PromptKind::crucible) return refinement_prompt(task, language_, contract_header_, attempt);
  const std::string& code = attempt.previous.source.empty() ? attempt.previous.output : attempt.previous.source;
  return prompt(task) + "\n\nYour previous attempt:\n" + fenced_code(code, language_) + "\n\n" +
         feedback_text(attempt.feedback);
}

std::optional<std::string> TaskPrompter::code(const std::string& reply) const {
  return extract_code(reply, language_);
}

}  // namespace crucible::policy

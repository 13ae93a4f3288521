#include "policy/kernel_prompt.h"

#include <sstream>

#include "crucible/eval/dtype.h"
#include "crucible/eval/utf8_text.h"

namespace crucible::policy {
namespace {

std::string shape_text(const eval::TensorSpec& t) {
  std::string s = std::string(eval::dtype_name(t.dtype)) + " [";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + t.shape[i];
  return s + "]";
}

// A block in the language asked for: Python for Triton, C++ or CUDA otherwise (a model that answers a C++ task in
// Python has no candidate); unlabelled blocks count for either.
bool code_language(const std::string& tag, bool python) {
  if (tag.empty()) return true;
  if (python) return tag == "python" || tag == "py";
  return tag == "cpp" || tag == "c++" || tag == "cuda" || tag == "cu" || tag == "c" || tag == "cxx";
}

// The Triton contract, as the README pins it.
constexpr const char* kTritonContract =
    "def crucible_forward(inputs, outputs):\n"
    "    # inputs, outputs: lists of torch tensors on the GPU, in the task's order; outputs are written in place.\n"
    "    # Launch your own @triton.jit kernels (they run on the current stream); return None.\n";

}  // namespace

std::string kernel_prompt(const eval::TaskSpec& task, eval::CandidateLanguage language,
                          const std::string& contract_header) {
  const bool cuda = language.is_cuda_cpp(), triton = language.kind == eval::CandidateKind::triton;
  const std::string sizes_set(eval::backend_name(language.backend));
  std::ostringstream p;
  p << "Write a fast " << (triton ? "Triton" : cuda ? "CUDA C++" : "C++") << " kernel for this task.\n\n";
  p << "Task: " << task.name << "\n" << task.description << "\n";
  if (!task.reference_source.empty()) p << "\nReference (PyTorch):\n```python" << task.reference_source << "```\n";
  if (task.reference == "torchscript")  // an imported problem: its module's state is the candidate's input
    p << "\nThe module's parameters and buffers are inputs too: after the tensors get_inputs() returns, in "
         "named_parameters() then named_buffers() order, named by their module path. The module runs in training "
         "mode (BatchNorm normalises with the batch's statistics).\n";
  p << "\nInputs, in order:\n";
  for (const auto& t : task.inputs) p << "- " << t.name << ": " << shape_text(t) << "\n";
  p << "Outputs, in order (allocated for you):\n";
  for (const auto& t : task.outputs) p << "- " << t.name << ": " << shape_text(t) << "\n";
  if (const auto& cases = task.cases_for(sizes_set); !cases.empty()) {
    p << "Scored by the geometric mean of its runtimes over these shapes:\n";
    for (const auto& c : cases) {
      p << "-";
      for (const auto& [symbol, value] : c.sizes) p << " " << symbol << "=" << value;
      p << " (" << c.name << ")\n";
    }
  } else if (task.sizes.count(sizes_set)) {
    p << "Sizes:";
    for (const auto& [symbol, value] : task.sizes.at(sizes_set)) p << " " << symbol << "=" << value;
    p << "\n";
  }
  for (const auto& [name, value] : task.params) p << "Parameter " << name << " = " << value << "\n";
  if (triton) {
    p << "\nThe candidate contract:\n```python\n" << kTritonContract << "```\n";
    p << "\nReply with one complete Python file in a single ```python code block. It may import only torch, triton, "
         "triton.language and math; it must define crucible_forward and compute the outputs with its own @triton.jit "
         "kernels (torch may allocate scratch tensors with torch.empty, never compute); no streams, threads, classes, "
         "try/except, module-level state or attribute assignments; float32 tasks stay in float32 (tl.dot with "
         "input_precision=\"ieee\").\n";
    return p.str();
  }
  p << "\nThe candidate contract (crucible/kernel.h):\n```c\n" << contract_header << "\n```\n";
  p << "\nReply with one complete source file in a single ```" << code_fence_tag(language)
    << " code block. It must #include \"crucible/kernel.h\", define crucible_forward"
    << (cuda ? " and launch its kernels on the given stream" : "")
    << ", compute the outputs itself (no library calls that do the work), and export nothing else.\n";
  return p.str();
}

std::optional<std::string> extract_code(const std::string& reply, eval::CandidateLanguage language) {
  const bool python = language.is_python();
  std::optional<std::string> last;
  std::size_t pos = 0;
  while (true) {
    const auto open = reply.find("```", pos);
    if (open == std::string::npos) break;
    const auto line_end = reply.find('\n', open);
    if (line_end == std::string::npos) break;
    std::string tag = reply.substr(open + 3, line_end - open - 3);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\r')) tag.pop_back();
    for (auto& c : tag) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto close = reply.find("\n```", line_end);
    if (close == std::string::npos) break;  // unterminated: the reply was cut off
    if (code_language(tag, python)) last = reply.substr(line_end + 1, close + 1 - (line_end + 1));
    pos = close + 4;
  }
  return last;
}

std::string code_fence_tag(eval::CandidateLanguage language) {
  return language.is_python() ? "python" : language.is_cuda_cpp() ? "cuda" : "cpp";
}

std::string refinement_prompt(const eval::TaskSpec& task, eval::CandidateLanguage language,
                              const std::string& contract_header, const Attempt& attempt) {
  const std::string& code = attempt.previous.source.empty() ? attempt.previous.output : attempt.previous.source;
  return kernel_prompt(task, language, contract_header) + "\n\nYour previous attempt:\n" + fenced_code(code, language) +
         "\n\n" + feedback_text(attempt.feedback);
}

std::string fenced_code(const std::string& code, eval::CandidateLanguage language) {
  constexpr std::size_t kCodeBytes = 16 * 1024;
  const std::string shown = code.size() > kCodeBytes ? eval::valid_utf8_prefix(code, kCodeBytes) + "\n// [cut]" : code;
  return "```" + code_fence_tag(language) + "\n" + eval::valid_utf8(shown) + "\n```";
}

}  // namespace crucible::policy

// How a KernelBench worker builds ModelNew for one task, and what its classified refusals mean for a verdict.
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "crucible/eval/kernelbench_candidate.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// An imported task's inputs are the problem's get_inputs() tensors x0, x1, ... then the module's parameters and
// buffers; a hand-written task that names its KernelBench problem has only the former.
int problem_inputs(const TaskSpec& task) {
  static const std::regex positional("x[0-9]+");
  int n = 0;
  while (n < static_cast<int>(task.inputs.size()) && std::regex_match(task.inputs[n].name, positional) &&
         task.inputs[n].name == "x" + std::to_string(n))
    ++n;
  return n;
}

// get_init_inputs() as the importer recorded it (a Python literal), at the CPU's scaled sizes where they differ.
std::string init_inputs(const TaskSpec& task, const std::string& size_set) {
  if (size_set == "cpu")
    if (auto it = task.origin.find("cpu_init_inputs"); it != task.origin.end()) return it->second;
  if (auto it = task.origin.find("init_inputs"); it != task.origin.end()) return it->second;
  return "[]";
}

}  // namespace

fs::path write_kernelbench_plan(const KernelBenchBuild& build, const TaskSpec& task, const std::string& size_set) {
  const int n = problem_inputs(task);
  json plan{{"candidate", build.candidate_path.string()}, {"init_inputs", init_inputs(task, size_set)},
            {"problem_inputs", n}, {"kernels", build.kernels},
            {"cuda_kernels", build.cuda_kernels}};
  json state = json::array();
  for (std::size_t i = static_cast<std::size_t>(n); i < task.inputs.size(); ++i) state.push_back(task.inputs[i].name);
  plan["state"] = state;
  json extensions = json::array();
  for (const auto& e : build.extensions)
    extensions.push_back({{"name", e.name}, {"functions", e.functions}, {"path", e.so_path.string()}});
  plan["extensions"] = extensions;
  const std::string text = plan.dump(1);
  const fs::path path = build.candidate_path.parent_path() / ("plan-" + sha256_hex(text).substr(0, 16) + ".json");
  if (!fs::exists(path)) {
    const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
    std::ofstream(tmp) << text;
    fs::rename(tmp, path);
  }
  return path;
}

std::optional<std::pair<Status, Reason>> kernelbench_refusal(const std::string& text) {
  // The worker's codes and the verdicts they make: what ModelNew is refused for, what its forward got wrong, and
  // an exception it raised. The code is the text's name up to ": ", parsed once here into its value.
  using C = ReasonCode;
  static const std::pair<ReasonCode, Status> kCodes[] = {
      {C::no_custom_work, Status::rejected},    {C::missing_parameter, Status::rejected},
      {C::parameter_shape, Status::rejected},   {C::dynamic_source, Status::rejected},
      {C::missing_model_new, Status::rejected}, {C::output_count, Status::incorrect},
      {C::output_type, Status::incorrect},      {C::output_shape, Status::incorrect},
      {C::python_exception, Status::runtime_error}};
  const std::string load_prefix = "load failed: ";  // how the evaluator quotes a load reply
  const std::string said = text.rfind(load_prefix, 0) == 0 ? text.substr(load_prefix.size()) : text;
  const std::size_t colon = said.find(": ");
  if (colon == std::string::npos) return std::nullopt;
  const std::optional<ReasonCode> code = parse_reason_code(std::string_view(said).substr(0, colon));
  if (!code) return std::nullopt;
  for (const auto& [known, status] : kCodes)
    if (known == *code) return std::make_pair(status, Reason{known, said.substr(colon + 2)});
  return std::nullopt;
}

}  // namespace crucible::eval

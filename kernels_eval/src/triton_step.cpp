// A Triton compile step's process: its confinement, limits and environment, and what its one line of JSON says.
#include "triton_step.h"

#include <sstream>

#include "crucible/eval/landlock.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/utf8_text.h"
#include "worker_process.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::optional<json> last_json_line(const std::string& output) {
  std::stringstream lines(output);
  std::optional<json> found;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    if (json j = json::parse(line, nullptr, false); !j.is_discarded() && j.is_object()) found = std::move(j);
  }
  return found;
}

nlohmann::json triton_shapes_json(const std::vector<TritonShapeSet>& sets) {
  auto list = [](const std::vector<TensorShape>& ts) {
    json a = json::array();
    for (const auto& t : ts) a.push_back({static_cast<int>(t.dtype), t.shape});
    return a;
  };
  json out = json::array();
  for (const auto& set : sets) out.push_back({{"inputs", list(set.inputs)}, {"outputs", list(set.outputs)}});
  return out;
}

namespace {

// What a compile step may reach (Landlock): the system's programs and libraries; the Python's own trees (its
// prefixes and site-packages: PyTorch, Triton and Triton's ptxas) and our package; a CUDA toolkit; what the GPU
// driver reads about the machine (/sys, /proc/driver/nvidia and a few /proc files that are not any process's); the
// GPU's device files; its work directory (Triton's cache, HOME and TMPDIR) to write; and its own /proc/self, where
// cuInit names its threads. Not /etc beyond the linker's cache, /home, /root, /tmp or other processes' /proc. What it
// runs is also only what the gate let through.
FileRules step_files(const TritonStep& step) {
  FileRules rules;
  rules.read_only = system_files();
  for (const auto& d : step.python_dirs) rules.read_only.push_back(d);
  for (const auto& d : step.read_only) rules.read_only.push_back(d);
  rules.read_only.push_back(default_python_dir().string());
  std::error_code ec;
  if (const fs::path toolkit = fs::canonical("/usr/local/cuda", ec); !ec) rules.read_only.push_back(toolkit.string());
  rules.read_write = {step.work_dir.string()};
  allow_gpu_driver(rules);
  rules.own_proc = true;
  return rules;
}

ProcessLimits step_limits(const TritonStep& step) {
  ProcessLimits limits;
  limits.wall_seconds = step.time_limit_s;
  limits.file_size_bytes = std::size_t{256} << 20;
  limits.max_output_bytes = 16 * 1024;
  limits.environment = {"PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + step.home.string(),
                        "TMPDIR=" + step.tmp_dir.string(), "PYTHONDONTWRITEBYTECODE=1", kOneQueueContextEnv};
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"})
    if (const char* value = std::getenv(name)) limits.environment.push_back(std::string(name) + "=" + value);
  limits.files = step_files(step);
  return limits;
}

}  // namespace

TritonStepResult run_triton_step(const TritonStep& step, std::size_t sets) {
  TritonStepResult out;
  const ProcessResult r = run_process(step.argv, step_limits(step), step.work_dir.string());
  if (r.timed_out) {
    out.kind = TritonStepResult::Kind::timed_out;
    out.log = "Triton's compilation took longer than " + std::to_string(step.time_limit_s) + " s";
    return out;
  }
  const auto result = last_json_line(r.output);
  if (!result) {
    out.log = "the Triton compile step ended without a result (exit " + std::to_string(r.exit_code) + ", signal " +
              std::to_string(r.signal) + "): " +
              valid_utf8(r.output.substr(r.output.size() > 1500 ? r.output.size() - 1500 : 0));
    return out;
  }
  // The step's output passed through the candidate's process: fields of the wrong type read as an environment
  // failure, never as an exception here.
  auto text_field = [&](const char* key, const char* fallback) {
    const auto it = result->find(key);
    return it != result->end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
  };
  const auto compiled = result->find("compiled");
  if (compiled != result->end() && compiled->is_number_unsigned())
    out.compiled = std::min(compiled->get<std::size_t>(), sets);
  out.log = valid_utf8(text_field("error", ""));
  const std::string kind = text_field("kind", "environment");
  if (kind == "") out.kind = TritonStepResult::Kind::compiled;
  else if (kind == "run") out.kind = TritonStepResult::Kind::run_failed;
  else if (kind == "compile") out.kind = TritonStepResult::Kind::compile_failed;
  else out.kind = TritonStepResult::Kind::environment;  // "environment", or nothing the step would print
  return out;
}

}  // namespace crucible::eval

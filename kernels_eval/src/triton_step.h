#pragma once
// A Triton compile step: a Python script that runs a candidate once on scratch tensors, so that Triton compiles every
// kernel it launches (ptxas and its launcher included) into the candidate's own cache, before a sandboxed worker that
// cannot run ptxas loads them. It runs as the evaluator's user with a scrubbed environment, a time limit, a file-size
// limit, and confined by Landlock. Triton candidates (crucible_triton/compile.py) and KernelBench answers with
// @triton.jit kernels (crucible_kernelbench/compile_triton.py) have one each; both print the same JSON result.
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace crucible::eval {

struct TritonStep {
  std::vector<std::string> argv;         // the Python, "-I", the script and its arguments
  std::vector<std::string> python_dirs;  // the Python's own trees (prefixes, site-packages), read-only
  std::vector<std::string> read_only;    // anything else it reads (the candidate's build, a KernelBench answer's modules)
  std::filesystem::path work_dir;        // read and write, and its working directory: Triton's cache is under it
  std::filesystem::path home, tmp_dir;   // HOME and TMPDIR, under work_dir
  double time_limit_s = 120.0;
};

struct TritonStepResult {
  // compiled: every shape set was; run_failed: the candidate failed when run (its worker reports that, seeing the
  // same failure); compile_failed: Triton refused a kernel; environment: the machine failed (or the step said nothing).
  enum class Kind { compiled, run_failed, compile_failed, timed_out, environment };
  Kind kind = Kind::environment;
  std::size_t compiled = 0;  // the leading shape sets Triton compiled (at most the number asked for)
  std::string log;           // Triton's message, the step's output, or why it failed
};

// Runs the step, which was asked to compile `sets` shape sets, and reads its result.
TritonStepResult run_triton_step(const TritonStep& step, std::size_t sets);

struct TritonShapeSet;
// A list of shape sets as the compile steps read them: [{"inputs": [[dtype, [dims]], ...], "outputs": [...]}], each
// dtype the number crucible_dtype gives it.
nlohmann::json triton_shapes_json(const std::vector<TritonShapeSet>& sets);

// The last line of a process's output that parses as a JSON object (Python may print warnings before it).
std::optional<nlohmann::json> last_json_line(const std::string& output);

}  // namespace crucible::eval

#include "crucible/eval/triton_candidate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "crucible/eval/compiler.h"
#include "crucible/eval/landlock.h"
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"
#include "worker_process.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path default_python_dir() {
  if (const char* env = std::getenv("CRUCIBLE_PYTHON_DIR")) return env;
#ifdef CRUCIBLE_PYTHON_DEFAULT_DIR
  return CRUCIBLE_PYTHON_DEFAULT_DIR;
#else
  return "python";
#endif
}

fs::path default_python_worker_support() {
  if (const char* env = std::getenv("CRUCIBLE_PYTHON_WORKER_SUPPORT")) return env;
#ifdef CRUCIBLE_PYTHON_WORKER_SUPPORT_DEFAULT_PATH
  return CRUCIBLE_PYTHON_WORKER_SUPPORT_DEFAULT_PATH;
#else
  return {};
#endif
}

namespace {

std::string resolve_python() {
  if (const char* env = std::getenv("CRUCIBLE_TRITON_PYTHON")) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((fs::path(dir) / "python3").c_str(), X_OK) == 0) return (fs::path(dir) / "python3").string();
  return {};
}

// The last line of a process's output that parses as a JSON object (Python may print warnings before it).
std::optional<json> last_json(const std::string& output) {
  std::stringstream lines(output);
  std::optional<json> found;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    try {
      found = json::parse(line);
    } catch (const json::exception&) {
    }
  }
  return found;
}

// The gate needs no GPU and no third-party module: the standard library of any Python.
ProcessLimits gate_limits() {
  ProcessLimits limits;
  limits.wall_seconds = 30.0;
  limits.address_space_bytes = std::size_t{2} << 30;
  limits.environment = {"PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"};
  return limits;
}

// Runs the gate on a candidate file: its JSON verdict, or none (and `error`) when the gate itself did not run.
std::optional<json> run_gate(const std::string& python, const fs::path& candidate, const std::vector<DType>& dtypes,
                             std::string& error) {
  std::string names;
  for (DType d : dtypes) names += (names.empty() ? "" : ",") + std::string(dtype_name(d));
  ProcessResult r = run_process({python, "-I", (default_python_dir() / "crucible_triton" / "gate.py").string(),
                                 candidate.string(), "--dtypes", names},
                                gate_limits());
  auto verdict = last_json(r.output);
  if (!r.ok() || !verdict) {
    error = "the Triton gate did not run: " + valid_utf8(r.output.substr(0, 500));
    return std::nullopt;
  }
  return verdict;
}

std::vector<Reason> refusals_of(const json& verdict) {
  std::vector<Reason> refusals;
  for (const auto& x : verdict["refusals"])
    refusals.push_back(reason_from_text(x["code"].get<std::string>(), valid_utf8(x["detail"].get<std::string>())));
  return refusals;
}

}  // namespace

std::optional<TritonPython> find_triton_python(std::string& why) {
  static std::mutex mutex;
  static bool probed = false;
  static std::optional<TritonPython> found;
  static std::string reason;
  std::lock_guard<std::mutex> lock(mutex);
  if (!probed) {
    probed = true;
    const std::string python = resolve_python();
    if (python.empty()) {
      reason = "no python3 on this node (set CRUCIBLE_TRITON_PYTHON to the Python that has PyTorch and Triton)";
    } else {
      ProcessLimits limits;
      limits.wall_seconds = 120.0;
      const std::string probe =
          "import json, site, sys\n"
          "try:\n    import torch, triton\nexcept Exception as e:\n"
          "    print(json.dumps({'error': type(e).__name__ + ': ' + str(e)})); sys.exit(0)\n"
          "print(json.dumps({'versions': 'torch %s, triton %s' % (torch.__version__, triton.__version__),"
          " 'cuda': torch.cuda.is_available(), 'executable': sys.executable,"
          " 'dirs': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix} | set(site.getsitepackages()))}))\n";
      ProcessResult r = run_process({python, "-I", "-c", probe}, limits);
      auto j = last_json(r.output);
      if (!r.ok() || !j) {
        reason = python + " could not be asked for PyTorch and Triton: " + valid_utf8(r.output.substr(0, 300));
      } else if (j->contains("error")) {
        reason = "no Triton on this node: " + python + " cannot import torch and triton (" +
                 (*j)["error"].get<std::string>() + ")";
      } else if (!(*j)["cuda"].get<bool>()) {
        reason = "the PyTorch of " + python + " sees no GPU";
      } else {
        TritonPython t;
        t.executable = (*j)["executable"].get<std::string>();
        t.versions = (*j)["versions"].get<std::string>();
        for (const auto& d : (*j)["dirs"]) t.dirs.push_back(d.get<std::string>());
        found = t;
      }
    }
  }
  why = reason;
  return found;
}

std::vector<Reason> triton_gate(const std::string& python, const std::string& source, const std::vector<DType>& dtypes,
                                std::string& error) {
  const fs::path dir = make_scratch_dir("gate");
  std::ofstream(dir / "candidate.py", std::ios::binary) << source;
  auto verdict = run_gate(python, dir / "candidate.py", dtypes, error);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return verdict ? refusals_of(*verdict) : std::vector<Reason>{};
}

namespace {

json shapes_json(const TritonShapeSet& set) {
  auto list = [](const std::vector<TensorShape>& ts) {
    json a = json::array();
    for (const auto& t : ts) a.push_back({static_cast<int>(t.dtype), t.shape});
    return a;
  };
  return json{{"inputs", list(set.inputs)}, {"outputs", list(set.outputs)}};
}

// What Triton's compile step may reach (Landlock): the system's programs and libraries; the Python's own trees (its
// prefixes and site-packages: PyTorch, Triton and Triton's ptxas) and our package; a CUDA toolkit; what the GPU
// driver reads about the machine (/sys, /proc/driver/nvidia and a few /proc files that are not any process's); the
// GPU's device files; its own directory (the candidate, Triton's cache, HOME and TMPDIR) to write; and its own
// /proc/self, where cuInit names its threads. Not /etc beyond the linker's cache, /home, /root, /tmp or other
// processes' /proc. What it runs is also only what the gate let through.
FileRules compile_step_files(const TritonPython& python, const fs::path& dir) {
  FileRules rules;
  rules.read_only = system_files();
  for (const auto& d : python.dirs) rules.read_only.push_back(d);
  rules.read_only.push_back(default_python_dir().string());
  std::error_code ec;
  if (const fs::path toolkit = fs::canonical("/usr/local/cuda", ec); !ec) rules.read_only.push_back(toolkit.string());
  rules.read_write = {dir.string()};
  allow_gpu_driver(rules);
  rules.own_proc = true;
  return rules;
}

}  // namespace

TritonBuild build_triton_candidate(const TritonPython& python, const std::string& source,
                                   const std::vector<TritonShapeSet>& shape_sets, const fs::path& cache_dir,
                                   const TritonBuildOptions& options) {
  TritonBuild b;
  const auto start = std::chrono::steady_clock::now();
  auto done = [&]() -> TritonBuild {
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return b;
  };
  if (source.size() > options.max_source_bytes) {
    b.outcome = TritonBuild::Outcome::source_too_large;
    b.log = "source is " + std::to_string(source.size()) + " bytes (limit " + std::to_string(options.max_source_bytes) + ")";
    return done();
  }
  if (shape_sets.empty()) {
    b.outcome = TritonBuild::Outcome::environment_error;
    b.log = "no shapes to compile the candidate for";
    return done();
  }
  // One directory per source and GPU: its Triton cache grows with each set of shapes compiled (a multi-shape task
  // compiles its shapes into one cache, and kernels whose specialisation does not change are compiled once).
  b.hash = sha256_hex(source + "\n" + options.device_name + "\n" + python.versions + "\n" + python.executable);
  const fs::path dir = cache_dir / "triton" / b.hash;
  b.candidate_path = dir / "candidate.py";
  std::error_code ec;
  // A marker per shape set built; only the sets without one are compiled.
  json missing = json::array();
  std::vector<fs::path> missing_markers;
  for (const auto& set : shape_sets) {
    const json shapes = shapes_json(set);
    const fs::path marker = dir / ("built-" + sha256_hex(shapes.dump()).substr(0, 16));
    if (fs::exists(marker, ec)) continue;
    missing.push_back(shapes);
    missing_markers.push_back(marker);
  }
  if (missing.empty()) {
    touch_cache_entry(dir);
    b.cached = true;
    b.outcome = TritonBuild::Outcome::ok;
    return done();
  }
  fs::create_directories(dir / "triton-cache", ec);
  if (ec) {
    b.outcome = TritonBuild::Outcome::environment_error;
    b.log = "cannot make " + dir.string() + ": " + ec.message();
    return done();
  }
  if (!fs::exists(b.candidate_path, ec)) {  // written once, through a temporary file: another build may read it
    const fs::path tmp = dir / ("candidate.py." + std::to_string(getpid()) + ".tmp");
    std::ofstream out(tmp, std::ios::binary);
    out << source;
    if (!out.flush()) {
      b.outcome = TritonBuild::Outcome::environment_error;
      b.log = "cannot write the candidate (is the disk full?)";
      return done();
    }
    out.close();
    fs::rename(tmp, b.candidate_path, ec);
  }

  // 1. The gate: the source's syntax tree, before any of it runs.
  std::vector<DType> dtypes;  // the same in every shape set
  for (const auto* group : {&shape_sets.front().inputs, &shape_sets.front().outputs})
    for (const auto& t : *group) dtypes.push_back(t.dtype);
  auto verdict = run_gate(python.executable, b.candidate_path, dtypes, b.log);
  if (!verdict) {
    b.outcome = TritonBuild::Outcome::environment_error;
    return done();
  }
  std::ofstream(dir / "gate.json") << verdict->dump();
  b.refusals = refusals_of(*verdict);
  if (!b.refusals.empty()) {
    b.outcome = TritonBuild::Outcome::rejected;
    return done();
  }

  // 2. Compile: the candidate runs once on scratch tensors of the task's shapes, and Triton fills its cache.
  ProcessLimits limits;
  limits.wall_seconds = options.time_limit_s;
  limits.file_size_bytes = std::size_t{256} << 20;
  limits.max_output_bytes = 16 * 1024;
  limits.environment = {"PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + dir.string(),
                        "TMPDIR=" + (dir / "triton-cache").string(), "PYTHONDONTWRITEBYTECODE=1", kOneQueueContextEnv};
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"})
    if (const char* value = std::getenv(name)) limits.environment.push_back(std::string(name) + "=" + value);
  limits.files = compile_step_files(python, dir);
  ProcessResult r = run_process({python.executable, "-I", (default_python_dir() / "crucible_triton" / "compile.py").string(),
                                 "--candidate", b.candidate_path.string(), "--cache", (dir / "triton-cache").string(),
                                 "--device", std::to_string(options.device), "--shapes", missing.dump()},
                                limits, dir.string());
  if (r.timed_out) {
    b.outcome = TritonBuild::Outcome::timed_out;
    b.log = "Triton's compilation took longer than " + std::to_string(options.time_limit_s) + " s";
    return done();
  }
  auto result = last_json(r.output);
  if (!result) {
    b.outcome = TritonBuild::Outcome::environment_error;
    b.log = "the Triton compile step ended without a result (exit " + std::to_string(r.exit_code) + ", signal " +
            std::to_string(r.signal) + "): " + valid_utf8(r.output.substr(r.output.size() > 1500 ? r.output.size() - 1500 : 0));
    return done();
  }
  // The step's output passed through the candidate's process: fields of the wrong type read as an environment
  // failure, never as an exception here.
  auto text_field = [&](const char* key, const char* fallback) {
    const auto it = result->find(key);
    return it != result->end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
  };
  const auto compiled_field = result->find("compiled");
  const std::size_t compiled =
      compiled_field != result->end() && compiled_field->is_number_unsigned()
          ? std::min(compiled_field->get<std::size_t>(), missing_markers.size())
          : 0;
  const std::string kind = text_field("kind", "environment");
  for (std::size_t i = 0; i < compiled; ++i) std::ofstream(missing_markers[i]) << python.versions << "\n";
  b.log = valid_utf8(text_field("error", ""));
  if (kind == "compile") {
    b.outcome = TritonBuild::Outcome::failed;
    return done();
  }
  if (kind != "" && kind != "run") {  // "environment", or nothing the step would print
    b.outcome = TritonBuild::Outcome::environment_error;
    return done();
  }
  // A candidate that fails when run (not when compiled) is reported by the worker, which sees the same failure; the
  // sets after the failing one are compiled when they are evaluated.
  b.outcome = TritonBuild::Outcome::ok;
  prune_cache(cache_dir, options.max_cache_bytes);  // this build is the newest entry: never the one taken
  return done();
}

}  // namespace crucible::eval

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
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"
#include "triton_step.h"

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
  auto verdict = last_json_line(r.output);
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
      auto j = last_json_line(r.output);
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
    const json shapes = triton_shapes_json({set}).front();
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
  TritonStep step;
  step.argv = {python.executable, "-I", (default_python_dir() / "crucible_triton" / "compile.py").string(),
               "--candidate", b.candidate_path.string(), "--cache", (dir / "triton-cache").string(),
               "--device", std::to_string(options.device), "--shapes", missing.dump()};
  step.python_dirs = python.dirs;
  step.work_dir = dir;
  step.home = dir;
  step.tmp_dir = dir / "triton-cache";
  step.time_limit_s = options.time_limit_s;
  const TritonStepResult r = run_triton_step(step, missing_markers.size());
  for (std::size_t i = 0; i < r.compiled; ++i) std::ofstream(missing_markers[i]) << python.versions << "\n";
  b.log = r.log;
  switch (r.kind) {
    case TritonStepResult::Kind::timed_out: b.outcome = TritonBuild::Outcome::timed_out; return done();
    case TritonStepResult::Kind::compile_failed: b.outcome = TritonBuild::Outcome::failed; return done();
    case TritonStepResult::Kind::environment: b.outcome = TritonBuild::Outcome::environment_error; return done();
    case TritonStepResult::Kind::compiled:
    case TritonStepResult::Kind::run_failed: break;
  }
  // A candidate that fails when run (not when compiled) is reported by the worker, which sees the same failure; the
  // sets after the failing one are compiled when they are evaluated.
  b.outcome = TritonBuild::Outcome::ok;
  prune_cache(cache_dir, options.max_cache_bytes);  // this build is the newest entry: never the one taken
  return done();
}

}  // namespace crucible::eval

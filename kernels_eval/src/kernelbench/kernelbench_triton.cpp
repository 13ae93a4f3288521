// A KernelBench answer's Triton kernels compiled into its own cache before its sandboxed worker loads them.
#include "kernelbench_triton.h"

#include <chrono>
#include <fstream>

#include "crucible/eval/compile_cache.h"
#include "crucible/eval/compiler.h"
#include "triton_step.h"

namespace crucible::eval {
namespace fs = std::filesystem;

fs::path kernelbench_triton_cache(const KernelBenchBuild& built) {
  return built.candidate_path.parent_path() / "triton-cache";
}

TritonStep kernelbench_triton_step(const KernelBenchPython& python, const KernelBenchBuild& built, const fs::path& plan,
                                   const TritonShapeSet& shapes, const TritonBuildOptions& options) {
  const fs::path cache = kernelbench_triton_cache(built);
  TritonStep step;
  step.argv = {python.executable, "-I", (default_python_dir() / "crucible_kernelbench" / "compile_triton.py").string(),
               "--plan", plan.string(), "--cache", cache.string(), "--device", std::to_string(options.device),
               "--shapes", triton_shapes_json({shapes}).dump()};
  step.python_dirs = python.dirs;
  // The plan and the source beside it are read, never written: the worker trusts them. Only the cache is written.
  step.read_only = {built.candidate_path.parent_path().string()};
  for (const auto& e : built.extensions) step.read_only.push_back(e.so_path.parent_path().string());
  step.work_dir = step.home = step.tmp_dir = cache;
  step.time_limit_s = options.time_limit_s;
  return step;
}

namespace {

// One marker per plan (it names the task's init inputs and the extensions), shapes, GPU model and Python.
fs::path step_marker(const KernelBenchPython& python, const KernelBenchBuild& built, const fs::path& plan,
                     const TritonShapeSet& shapes, const TritonBuildOptions& options) {
  const std::string key = plan.filename().string() + "\n" + triton_shapes_json({shapes}).dump() + "\n" +
                          options.device_name + "\n" + python.versions + "\n" + python.executable;
  return kernelbench_triton_cache(built) / ("built-" + sha256_hex(key).substr(0, 16));
}

}  // namespace

TritonBuild compile_kernelbench_triton(const KernelBenchPython& python, const KernelBenchBuild& built,
                                       const fs::path& plan, const TritonShapeSet& shapes,
                                       const TritonBuildOptions& options) {
  TritonBuild b;
  const auto start = std::chrono::steady_clock::now();
  auto done = [&](TritonBuild::Outcome outcome) {
    b.outcome = outcome;
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return b;
  };
  b.candidate_path = built.candidate_path;
  b.hash = built.candidate_path.parent_path().filename().string();
  const fs::path marker = step_marker(python, built, plan, shapes, options);
  std::error_code ec;
  if (fs::exists(marker, ec)) {
    b.cached = true;
    return done(TritonBuild::Outcome::ok);
  }
  fs::create_directories(kernelbench_triton_cache(built), ec);
  if (ec) {
    b.log = "cannot make " + kernelbench_triton_cache(built).string() + ": " + ec.message();
    return done(TritonBuild::Outcome::environment_error);
  }
  const TritonStepResult r = run_triton_step(kernelbench_triton_step(python, built, plan, shapes, options), 1);
  b.log = r.log;
  if (r.compiled == 1) std::ofstream(marker) << python.versions << "\n";
  switch (r.kind) {
    case TritonStepResult::Kind::timed_out: return done(TritonBuild::Outcome::timed_out);
    case TritonStepResult::Kind::compile_failed: return done(TritonBuild::Outcome::failed);
    case TritonStepResult::Kind::environment: return done(TritonBuild::Outcome::environment_error);
    case TritonStepResult::Kind::compiled:
    case TritonStepResult::Kind::run_failed: break;
  }
  touch_cache_entry(built.candidate_path.parent_path());
  return done(TritonBuild::Outcome::ok);
}

}  // namespace crucible::eval

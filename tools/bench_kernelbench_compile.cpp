// bench_kernelbench_compile: cold build time of KernelBench-format answers through Crucible (gate, extraction,
// compile of each load_inline extension, symbol gate), for each way of building an extension: lean (Crucible's
// bindings and torch/types.h precompiled, falling back to load_inline's unit where that fails), precompiled
// (load_inline's unit, torch/extension.h precompiled) and plain. Every build starts from an empty compile cache, so
// nothing of an answer is reused; only the precompiled headers and the lean kit are, each made once before timing and
// reported on its own. The load_inline baseline is tools/bench_load_inline.py.
// Usage: bench_kernelbench_compile ANSWER.py... [--count N] [--backend cpu|cuda] [--arch sm_90]
//                                  [--modes lean,precompiled,plain]
//   --count N builds each answer N times (default 1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/scratch_dirs.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// How the last build went: lean or not, and the compiler's path (CUDA: in halves, or the whole unit by nvcc, and why).
std::string g_path;

double build_seconds(const eval::KernelBenchPython& python, eval::Compiler& compiler, const std::string& source,
                     const eval::KernelBenchBuildOptions& options) {
  const auto built = eval::build_kernelbench_candidate(python, compiler, source, options);
  if (built.outcome != eval::KernelBenchBuild::Outcome::ok) {
    std::fprintf(stderr, "build failed: %s\n", built.compile.log.substr(0, 2000).c_str());
    for (const auto& r : built.refusals)
      std::fprintf(stderr, "  %s: %s\n", std::string(eval::reason_code_name(r.code)).c_str(), r.detail.c_str());
    std::exit(1);
  }
  g_path = std::string(built.lean ? "lean, " : "load_inline's unit, ") + eval::to_string(built.compile.path);
  if (!built.compile.whole_because.empty()) g_path += " (" + built.compile.whole_because.substr(0, 160) + ")";
  return built.seconds;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Readable by others: as root the compiler runs as nobody, and a header it cannot read is not used.
fs::path shared_dir(const std::string& name) {
  const fs::path dir = eval::make_scratch_dir(name);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                           fs::perms::others_exec);
  return dir;
}

// A compile cache of its own for one build, sharing the made-once headers and kit of `kits`.
fs::path cold_cache(const fs::path& kits) {
  const fs::path cache = shared_dir("bench-kb-cold");
  for (const char* dir : {"kernelbench-pch", "kernelbench-lean"}) {
    fs::create_directories(kits / dir);
    fs::create_directory_symlink(kits / dir, cache / dir);
  }
  return cache;
}

eval::ExtensionBuild parse_mode(const std::string& name) {
  if (name == "lean") return eval::ExtensionBuild::lean;
  if (name == "precompiled") return eval::ExtensionBuild::precompiled;
  if (name == "plain") return eval::ExtensionBuild::plain;
  std::fprintf(stderr, "unknown mode '%s' (lean, precompiled, plain)\n", name.c_str());
  std::exit(2);
}

double timed_build(const eval::KernelBenchPython& python, const fs::path& kits, const std::string& source,
                   const eval::KernelBenchBuildOptions& options) {
  const fs::path cache = cold_cache(kits);
  eval::Compiler compiler(cache, eval::default_include_dir());
  const double seconds = build_seconds(python, compiler, source, options);
  std::error_code ignored;
  fs::remove_all(cache, ignored);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each build's line as it ends (the tool runs under time limits)
  std::vector<fs::path> answers;
  std::vector<std::string> modes{"lean", "precompiled", "plain"};
  int count = 1;
  eval::KernelBenchBuildOptions options;
  options.time_limit_s = 600.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--count" && has_value) count = std::atoi(argv[++i]);
    else if (a == "--backend" && has_value) options.backend = eval::parse_backend(argv[++i]);
    else if (a == "--arch" && has_value) options.cuda_arch = argv[++i];
    else if (a == "--modes" && has_value) {
      modes.clear();
      std::stringstream list(argv[++i]);
      for (std::string m; std::getline(list, m, ',');) modes.push_back(m);
    } else answers.push_back(a);
  }
  if (answers.empty()) {
    std::fprintf(stderr, "usage: %s ANSWER.py... [--count N] [--backend cpu|cuda] [--arch sm_90] [--modes ...]\n",
                 argv[0]);
    return 2;
  }
  std::string why;
  const auto python = eval::find_kernelbench_python(why, options.backend == eval::Backend::cuda);
  if (!python) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  std::printf("python: %s (%s)\n", python->executable.c_str(), python->versions.c_str());
  const fs::path kits = shared_dir("bench-kb-kits");
  for (const auto& mode : modes) {
    options.extension_build = parse_mode(mode);
    // The first build makes this mode's precompiled header or kit (once per PyTorch and command, in practice).
    const double first = timed_build(*python, kits, read_text(answers.front()), options);
    std::printf("%s: first build, making its headers: %.2f s, %s\n", mode.c_str(), first, g_path.c_str());
    std::vector<double> times;
    for (const auto& answer : answers)
      for (int i = 0; i < count; ++i) {
        times.push_back(timed_build(*python, kits, read_text(answer), options));
        std::printf("  %-60s %6.2f s  %s\n", answer.string().c_str(), times.back(), g_path.c_str());
      }
    std::printf("%s: median %.2f s over %zu builds\n", mode.c_str(), median(times), times.size());
  }
  std::error_code ignored;
  fs::remove_all(kits, ignored);
  return 0;
}

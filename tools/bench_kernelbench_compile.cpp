// bench_kernelbench_compile: cold build time of KernelBench-format candidates through Crucible (gate, extraction,
// compile of each load_inline extension, symbol gate), with and without the precompiled torch/extension.h, for N
// distinct variants of one answer (a comment makes each unique, so nothing is cached; the precompiled header is built
// once before timing and reported on its own). The load_inline baseline is tools/bench_load_inline.py.
// Usage: bench_kernelbench_compile ANSWER.py [--count N] [--backend cpu|cuda] [--arch sm_90]
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

// The answer with a unique comment in every load_inline source string it holds: a different unit, a cold compile.
std::string variant(const std::string& answer, int i, bool pch) {
  std::string out = answer, mark = "\n// variant " + std::to_string(i) + (pch ? " pch" : " plain") + "\n";
  for (std::size_t at = out.find("#include <torch/extension.h>"); at != std::string::npos;
       at = out.find("#include <torch/extension.h>", at + mark.size() + 1))
    out.insert(at, mark);
  return out;
}

// How the last build went: the compiler's path (CUDA: in halves, or the whole unit by nvcc, and why).
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
  g_path = eval::to_string(built.compile.path);
  if (!built.compile.whole_because.empty()) g_path += " (" + built.compile.whole_because.substr(0, 160) + ")";
  return built.seconds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ANSWER.py [--count N] [--backend cpu|cuda] [--arch sm_90]\n", argv[0]);
    return 2;
  }
  int count = 3;
  eval::KernelBenchBuildOptions options;
  options.time_limit_s = 600.0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--count")) count = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--backend")) options.backend = eval::parse_backend(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--arch")) options.cuda_arch = argv[i + 1];
  }
  std::ifstream in(argv[1]);
  std::ostringstream text;
  text << in.rdbuf();
  std::string why;
  const auto python = eval::find_kernelbench_python(why, options.backend == eval::Backend::cuda);
  if (!python) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  const fs::path cache = eval::make_scratch_dir("bench-kb-compile");
  // Readable by others: as root the compiler runs as nobody, and a header it cannot read is not used.
  fs::permissions(cache, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
  eval::Compiler compiler(cache, eval::default_include_dir());
  std::printf("python: %s (%s)\n", python->executable.c_str(), python->versions.c_str());
  const double pch = build_seconds(*python, compiler, variant(text.str(), -1, true), options);
  std::printf("first build, precompiling torch/extension.h: %.2f s, %s\n", pch, g_path.c_str());
  for (bool with_pch : {true, false}) {
    options.precompiled_header = with_pch;
    std::vector<double> times;
    for (int i = 0; i < count; ++i) {
      times.push_back(build_seconds(*python, compiler, variant(text.str(), i, with_pch), options));
      std::printf("  %s build %d: %.2f s, %s\n", with_pch ? "precompiled-header" : "plain", i, times.back(),
                  g_path.c_str());
    }
    std::printf("%s: median %.2f s over %d\n", with_pch ? "with the precompiled header" : "without it", median(times),
                count);
  }
  std::error_code ignored;
  fs::remove_all(cache, ignored);
  return 0;
}

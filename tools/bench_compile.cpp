// bench_compile: cold compile time per candidate through Crucible's compiler (content-addressed cache
// bypassed by a fresh cache directory), for N distinct variants of an elementwise kernel, serially and with
// J compiles in flight. Usage: bench_compile [--backend cpu|cuda] [--count N] [--jobs J] [--arch sm_90]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_usage.h"
#include "bench/relu_variants.h"
#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

std::string cpu_variant(int i) {
  return "#include <crucible/kernel.h>\nconstexpr int kUnroll = " + std::to_string(1 + i % 8) + ";\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
         "  const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;\n"
         "  long n = in[0].shape[0] * in[0].shape[1];\n"
         "#pragma GCC unroll kUnroll\n"
         "  for (long i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n  return 0;\n}\n// variant " +
         std::to_string(i) + "\n";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bench::exit_on_help(argc, argv, "usage: bench_compile [--backend cpu|cuda] [--count N] [--jobs J] [--arch sm_90]");
  std::string backend = "cuda", arch = "sm_90";
  int count = 16, jobs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
    else if (!std::strcmp(argv[i], "--count")) count = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--jobs")) jobs = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--arch")) arch = argv[i + 1];
  }
  fs::path cache = fs::temp_directory_path() / ("crucible-bench-compile-" + std::to_string(getpid()));
  eval::Compiler compiler(cache, eval::default_include_dir());
  eval::CompileOptions options;
  options.backend = backend;
  options.cuda_arch = arch;
  std::vector<double> seconds(count, 0.0);
  std::vector<int> ok(count, 0);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < jobs; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < count; i += jobs) {
        auto r = compiler.compile(backend == "cuda" ? bench::relu_variant(i) : cpu_variant(i), options);
        seconds[i] = r.seconds;
        ok[i] = r.ok() && !r.cached;
        if (!r.ok()) std::fprintf(stderr, "variant %d failed:\n%s\n", i, r.log.c_str());
      }
    });
  for (auto& th : threads) th.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("backend=%s arch=%s count=%d jobs=%d built=%d\n", backend.c_str(), arch.c_str(), count, jobs,
              static_cast<int>(std::count(ok.begin(), ok.end(), 1)));
  std::printf("per candidate: median %.3f s, min %.3f s, max %.3f s; wall %.2f s (%.3f s per candidate)\n",
              median(seconds), *std::min_element(seconds.begin(), seconds.end()),
              *std::max_element(seconds.begin(), seconds.end()), wall, wall / count);
  std::error_code ec;
  fs::remove_all(cache, ec);
  return 0;
}

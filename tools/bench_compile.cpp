// bench_compile: cold compile time per candidate through Crucible's compiler (content-addressed cache
// bypassed by a fresh cache directory), for N distinct variants of an elementwise kernel (or the shipped naive
// CUDA candidates), serially and with J compiles in flight. CUDA builds are measured both ways in one run: whole
// (nvcc's full chain) and split (device and host halves side by side, crucible/eval/cuda_split.h).
// Usage: bench_compile [--backend cpu|cuda] [--count N] [--jobs J] [--arch sm_90] [--source variants|shipped]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
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

std::vector<std::string> shipped_cuda_candidates() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(CRUCIBLE_SOURCE_DIR) / "configs" / "candidates" / "cuda"))
    if (e.path().extension() == ".cu") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> sources;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::ostringstream text;
    text << in.rdbuf();
    sources.push_back(text.str());
  }
  return sources;
}

struct Row {
  std::string name;
  std::vector<double> seconds;
  int built = 0;
  std::map<std::string, int> paths;
  double wall = 0.0;
};

Row measure(const std::string& name, eval::Compiler& compiler, const eval::CompileOptions& options,
            const std::vector<std::string>& sources, int jobs) {
  Row row{name, std::vector<double>(sources.size(), 0.0)};
  std::mutex mutex;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < jobs; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = t; i < sources.size(); i += jobs) {
        auto r = compiler.compile(sources[i], options);
        std::lock_guard lock(mutex);
        row.seconds[i] = r.seconds;
        row.built += r.ok() && !r.cached;
        ++row.paths[eval::to_string(r.path)];
        if (!r.ok()) std::fprintf(stderr, "%s: candidate %zu failed:\n%s\n", name.c_str(), i, r.log.c_str());
      }
    });
  for (auto& th : threads) th.join();
  row.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  bench::exit_on_help(argc, argv,
                      "usage: bench_compile [--backend cpu|cuda] [--count N] [--jobs J] [--arch sm_90] "
                      "[--source variants|shipped]");
  std::string arch = "sm_90", source = "variants";
  eval::Backend backend = eval::Backend::cuda;
  int count = 16, jobs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backend")) backend = eval::parse_backend(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--count")) count = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--jobs")) jobs = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--arch")) arch = argv[i + 1];
    else if (!std::strcmp(argv[i], "--source")) source = argv[i + 1];
  }
  fs::path cache = fs::temp_directory_path() / ("crucible-bench-compile-" + std::to_string(getpid()));
  eval::Compiler compiler(cache, eval::default_include_dir());
  eval::CompileOptions options;
  options.backend = backend;
  options.cuda_arch = arch;
  std::vector<std::string> sources;
  if (source == "shipped" && backend == eval::Backend::cuda) {
    sources = shipped_cuda_candidates();
  } else {
    for (int i = 0; i < count; ++i)
      sources.push_back(backend == eval::Backend::cuda ? bench::relu_variant(i) : cpu_variant(i));
  }
  std::vector<Row> rows;
  if (backend == eval::Backend::cuda) {
    // Split first: the whole builds then run on page caches the split builds warmed no more than they need.
    options.split_cuda = true;
    rows.push_back(measure("split", compiler, options, sources, jobs));
    options.split_cuda = false;
    rows.push_back(measure("whole", compiler, options, sources, jobs));
  } else {
    rows.push_back(measure("g++", compiler, options, sources, jobs));
  }
  std::printf("backend=%s arch=%s source=%s candidates=%zu jobs=%d\n\n", std::string(eval::backend_name(backend)).c_str(),
              arch.c_str(),
              source.c_str(), sources.size(), jobs);
  std::printf("| build | built | median s | min s | max s | wall s (per candidate) | paths taken |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows) {
    std::string paths;
    for (const auto& [path, n] : r.paths) paths += (paths.empty() ? "" : ", ") + path + " " + std::to_string(n);
    std::printf("| %s | %d/%zu | %.3f | %.3f | %.3f | %.2f (%.3f) | %s |\n", r.name.c_str(), r.built,
                r.seconds.size(), median(r.seconds), *std::min_element(r.seconds.begin(), r.seconds.end()),
                *std::max_element(r.seconds.begin(), r.seconds.end()), r.wall, r.wall / r.seconds.size(),
                paths.c_str());
  }
  if (rows.size() == 2 && median(rows[0].seconds) > 0)
    std::printf("\nsplit is %.2fx faster than whole (medians)\n", median(rows[1].seconds) / median(rows[0].seconds));
  std::error_code ec;
  fs::remove_all(cache, ec);
  return 0;
}

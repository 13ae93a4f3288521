// bench_kb_candidates: writes a replay directory of CUDA candidates for KernelBench's level-1 elementwise problems,
// K distinct variants per problem (bench/elementwise_variants.h), so a best-of-N sweep over problems at their own
// sizes can be judged by evaluator nodes (`[policy] kind = "replay"`). Each problem's task is kb_l1_<id>, as
// `crucible tasks import --kernelbench` names it.
// Usage: bench_kb_candidates OUT_DIR [K] [PROBLEM_ID ...]   (default: 64 variants of the eight problems below)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/elementwise_variants.h"

namespace fs = std::filesystem;
using crucible::bench::ElementwiseOp;

namespace {

// Level-1 problems whose forward is one elementwise map of one float input, with KernelBench's own constants.
const std::map<int, ElementwiseOp>& level1_elementwise() {
  static const std::map<int, ElementwiseOp> ops{
      {19, {"relu", "v > 0.f ? v : 0.f"}},
      {20, {"leaky_relu", "v > 0.f ? v : 0.01f * v"}},
      {21, {"sigmoid", "1.f / (1.f + expf(-v))"}},
      {22, {"tanh", "tanhf(v)"}},
      {25, {"swish", "v / (1.f + expf(-v))"}},
      {26, {"gelu", "0.5f * v * (1.f + erff(v * 0.70710678118654752f))"}},
      {28, {"hardsigmoid", "fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f)"}},
      {30, {"softsign", "v / (1.f + fabsf(v))"}},
      {31, {"elu", "v > 0.f ? v : expm1f(v)"}},
      {32, {"hardtanh", "fminf(fmaxf(v, -1.f), 1.f)"}},
  };
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [K] [PROBLEM_ID ...]\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  const int k = argc > 2 ? std::atoi(argv[2]) : 64;
  std::vector<int> ids;
  for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  if (ids.empty()) ids = {19, 20, 21, 22, 25, 28, 30, 32};
  if (k < 1 || k > 64) {
    std::fprintf(stderr, "K must be 1..64 (there are 64 distinct variants)\n");
    return 2;
  }
  for (int id : ids) {
    auto op = level1_elementwise().find(id);
    if (op == level1_elementwise().end()) {
      std::fprintf(stderr, "level-1 problem %d is not one of the elementwise problems this tool writes\n", id);
      return 2;
    }
    const fs::path dir = out / ("kb_l1_" + std::to_string(id));
    fs::create_directories(dir);
    for (int i = 0; i < k; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%02d.cu", i);
      std::ofstream(dir / name) << crucible::bench::elementwise_variant(op->second, i);
    }
    std::printf("%s: %d candidates (%s)\n", dir.c_str(), k, op->second.name.c_str());
  }
  return 0;
}

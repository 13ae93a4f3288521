// bench_mxfp4: how fast one expert's MXFP4 matrix is decoded to the model dtype (what training and long prefills do
// for every expert a step routes to), at gpt-oss's expert shapes. Prints a table: shape, milliseconds per decode, and
// the bytes a decode must move (packed read, decoded written) per second.
//   bench_mxfp4 [--device cuda:0] [--dtype bf16] [--repeats 20]
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "lm/model/mxfp4.h"
#include "guarded_main.h"

using namespace crucible::lm;

namespace {

void synchronize(const at::Tensor& t) {
  if (t.is_cuda()) t.reshape({-1})[0].item<float>();  // reading a value waits for the work before it
}

}  // namespace

static int run_tool(int argc, char** argv) {
  CLI::App app("bench_mxfp4: MXFP4 expert decoding speed");
  std::string device_name = "cpu", dtype_name = "bf16";
  int repeats = 20;
  app.add_option("--device", device_name, "cpu or cuda:N");
  app.add_option("--dtype", dtype_name, "bf16 or f32");
  app.add_option("--repeats", repeats, "decodes timed per shape (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  const c10::Device device(device_name);
  const auto dtype = dtype_name == "f32" ? at::kFloat : at::kBFloat16;
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const std::vector<Shape> shapes = {{"gate_up (5760 x 2880)", 5760, 2880}, {"down (2880 x 2880)", 2880, 2880}};
  std::printf("| expert matrix | ms per decode | GB/s (packed read + decoded written) |\n| --- | ---: | ---: |\n");
  for (const auto& s : shapes) {
    const auto opts = at::TensorOptions().device(device).dtype(at::kByte);
    const auto blocks = at::randint(0, 256, {s.rows, s.cols / 32, 16}, opts);
    const auto scales = at::randint(118, 123, {s.rows, s.cols / 32}, opts);
    // Random codes, read in the paired order a model's experts hold (on the CPU: put back in the stored order first).
    synchronize(mxfp4_decode(blocks, scales, dtype, CodeOrder::paired));  // warm-up: the table is made once per device
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      synchronize(mxfp4_decode(blocks, scales, dtype, CodeOrder::paired));
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double bytes = s.rows * (s.cols / 2.0 + s.cols / 32.0) + s.rows * s.cols * (dtype == at::kFloat ? 4.0 : 2.0);
    std::printf("| %s | %.3f | %.1f |\n", s.name, median, bytes / (median * 1e-3) / 1e9);
  }
  return 0;
}

int main(int argc, char** argv) {
  return crucible::tools::guarded_main("bench_mxfp4", [&] { return run_tool(argc, argv); });
}

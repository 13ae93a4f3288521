#pragma once
// The benchmarks' common front door: --help (or -h) prints the usage and exits 0 before any work starts; a GPU
// benchmark asked for a CUDA device on a machine without one says so and exits 2 instead of aborting.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "crucible/eval/evaluator.h"

namespace crucible::bench {

inline void exit_on_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s\n", usage);
      std::exit(0);
    }
}

// The --device argument as a device ("cpu", "cuda" or "cuda:N"); exits 2 saying why when it names none, or a GPU
// this machine does not have.
inline eval::Device usable_device(const std::string& text) {
  eval::Device device;
  try {
    device = eval::parse_device(text, /*allow_bare_cuda=*/true);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
  if (device.is_cuda() && eval::cuda_devices() == 0) {
    std::fprintf(stderr, "no usable CUDA GPU here for --device %s (use --device cpu where the benchmark has one)\n",
                 text.c_str());
    std::exit(2);
  }
  return device;
}

}  // namespace crucible::bench

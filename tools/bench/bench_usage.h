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

inline void exit_unless_device_usable(const std::string& device) {
  if (device.rfind("cuda", 0) == 0 && eval::cuda_devices() == 0) {
    std::fprintf(stderr, "no usable CUDA GPU here for --device %s (use --device cpu where the benchmark has one)\n",
                 device.c_str());
    std::exit(2);
  }
}

}  // namespace crucible::bench

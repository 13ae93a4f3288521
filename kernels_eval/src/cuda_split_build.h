#pragma once
// Builds a CUDA candidate in two halves that run side by side (crucible/eval/cuda_split.h): the device code by NVRTC
// (or nvcc -cubin where NVRTC cannot take it), the host code by g++, then one short link that embeds the cubin and
// binds each launched kernel to it. Every step is run by the caller's sandboxed runner in the build directory.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/subprocess.h"

namespace crucible::eval {

struct SplitToolchain {
  std::string nvcc, cxx;
  std::string nvrtc;  // crucible-nvrtc; empty where it was not built
  std::string cuda_arch;
  std::filesystem::path toolkit_include, toolkit_lib;
  std::vector<std::string> extra_flags;  // the candidate's nvcc flags (NVRTC is then not used)
  // A Python extension module (CompileOptions::SplitExtras): flags for the host half, for nvcc's device half, and
  // for the link, which leaves Python's own symbols to the interpreter that imports it.
  bool python_extension = false;
  std::vector<std::string> host_flags, device_flags, link_flags;
};

// The host half's compile command, without its input and output: what a precompiled header for it is built with.
std::vector<std::string> split_host_command(const SplitToolchain& tools);

// Whether a compiler command names clang (which takes neither -fno-gnu-unique nor g++'s precompiled headers).
bool is_clang(const std::string& compiler);

using RunStep = std::function<ProcessResult(const std::vector<std::string>& argv)>;

struct SplitBuild {
  enum class Kind {
    built,          // candidate.so is in the build directory
    device_failed,  // nvcc rejected the device code: `failure` is the candidate's compile result
    not_split,      // the whole-file compile must decide (`why_not` says why)
  };
  Kind kind = Kind::not_split;
  CompilePath path = CompilePath::whole;
  ProcessResult failure;
  std::string why_not;
  std::string log;  // the device compiler's messages (warnings on the candidate's code)
};

// The build directory holds candidate.cu, include/crucible/{kernel.h,fast_launch.h} and the exports script.
SplitBuild build_split(const std::string& source, const SplitToolchain& tools, const std::filesystem::path& work,
                       const RunStep& run);

}  // namespace crucible::eval

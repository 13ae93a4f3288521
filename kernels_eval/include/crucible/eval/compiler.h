#pragma once
// Stage 1: compile a candidate into a shared object, cached by content hash.
#include <cstddef>
#include <filesystem>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "crucible/eval/compile_cache.h"
#include "crucible/eval/device.h"
#include "crucible/eval/subprocess.h"

namespace crucible::eval {

// How a shared object was built: one compiler run over the whole file (g++, or nvcc's full chain), or a CUDA
// candidate in two halves side by side (device code by NVRTC or nvcc -cubin, host code by g++; cuda_split.h).
enum class CompilePath { whole, split_nvrtc, split_nvcc };
const char* to_string(CompilePath path);

struct CompileOptions {
  Backend backend = Backend::cpu;  // cpu: g++; cuda: nvcc
  std::string cuda_arch = "sm_90";
  // CUDA: build in two halves where the source allows it (about 3x faster); the whole-file nvcc build otherwise.
  bool split_cuda = true;
  std::vector<std::string> extra_flags;
  // The C++ compiler of a CPU build and of a split CUDA build's host half (g++ or clang++); empty: g++, or what
  // CRUCIBLE_CXX names.
  std::string cxx;
  double time_limit_s = 60.0;
  std::size_t memory_limit_bytes = std::size_t{4} << 30;
  std::size_t max_source_bytes = 256 * 1024;
  std::size_t max_binary_bytes = std::size_t{64} << 20;
  // A Python extension module (a KernelBench candidate's load_inline sources): it exports PyInit_<name> instead of
  // crucible_forward, and the compiler may read `read_only_dirs` (the Python's and PyTorch's headers) too.
  bool python_extension = false;
  std::vector<std::string> read_only_dirs;
  // What a split build of such a module needs beyond a plain candidate (its headers and precompiled header for the
  // host half, its headers for nvcc's device half, its libraries for the link). `extra_flags` are then the whole
  // build's alone, and do not keep NVRTC from the device half.
  struct SplitExtras {
    std::vector<std::string> host, device, link;
  } split_extras;
};

struct CompileResult {
  // environment_error: the compiler could not do its work for reasons not the candidate's (a full disk, a missing
  // compiler, a kill from outside); never cached.
  enum class Outcome { ok, failed, timed_out, source_too_large, environment_error };
  Outcome outcome = Outcome::failed;
  bool cached = false;
  CompilePath path = CompilePath::whole;  // how this call built it (not recorded for a cached result)
  std::string whole_because;              // a CUDA build not split: why (a refusal of the split, never a verdict)
  double seconds = 0.0;
  std::string hash;
  std::filesystem::path so_path;
  std::string log;
  bool ok() const { return outcome == Outcome::ok; }
};

class Compiler {
 public:
  // include_dir holds crucible/kernel.h; cache_dir is created on demand.
  Compiler(std::filesystem::path cache_dir, std::filesystem::path include_dir);

  CompileResult compile(const std::string& source, const CompileOptions& options);

  // The exact command line (without the source and output paths) that a backend uses.
  std::vector<std::string> flags(const CompileOptions& options) const;
  // The command of a split CUDA build's host half (g++), without its input and output.
  std::vector<std::string> split_host_flags(const CompileOptions& options) const;
  std::string cache_key(const std::string& source, const CompileOptions& options);
  const std::filesystem::path& cache_dir() const { return cache_dir_; }
  const std::filesystem::path& include_dir() const { return include_dir_; }
  // The cache's size bound (least recently used entries go first); default: default_cache_max_bytes().
  void set_max_cache_bytes(std::uintmax_t bytes) { max_cache_bytes_ = bytes; }

 private:
  // Every so many new entries (or after a large one), the cache is pruned to its bound.
  void prune_after_store(const std::filesystem::path& so);
  // `tool --version`, asked once per tool.
  const std::string& compiler_version(const std::string& tool);

  std::filesystem::path cache_dir_;
  std::filesystem::path include_dir_;
  std::string header_text_;
  std::string fast_launch_text_;  // crucible/fast_launch.h, the host half's prelude
  std::mutex mutex_;
  std::map<std::string, std::string> versions_;  // by tool
  std::atomic<int> compiles_since_prune_{0};
  std::uintmax_t max_cache_bytes_ = default_cache_max_bytes();
};

std::filesystem::path default_cache_dir();
// How a build shares the host with this evaluator's timing: a CPU build is stopped while a CPU candidate is timed
// (ChildrenPaused) and otherwise runs at normal priority; a CUDA build overlaps GPU timing on purpose, at nice 10.
void set_build_priority(ProcessLimits& limits, Backend backend);
std::string sha256_hex(const std::string& data);

}  // namespace crucible::eval

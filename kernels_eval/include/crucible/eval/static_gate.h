#pragma once
// Stage 2: inspect a compiled shared object before anything of it runs.
// Imports must be on the backend's allowlist (plus what the task allows); exports must be the
// contract's entry points only.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "crucible/eval/verdict.h"

namespace crucible::eval {

struct DynamicSymbols {
  std::vector<std::string> imports;  // undefined symbols the loader must resolve
  std::vector<std::string> exports;  // defined global symbols with default visibility
};

// Reads the ELF64 dynamic symbol table; throws std::runtime_error on a malformed file.
DynamicSymbols read_dynamic_symbols(const std::filesystem::path& so_path);

struct GatePolicy {
  Backend backend = Backend::cpu;
  std::vector<std::string> extra_allowed_imports;  // from the task
  std::size_t max_binary_bytes = std::size_t{64} << 20;
  // A Python extension module built from a KernelBench candidate's load_inline sources: it may import PyTorch,
  // pybind11, Python and the C++ library (its entry point is PyInit_<name>), and is still refused processes,
  // threads, files, sockets, dynamic loading, clocks, signals and streams, events or graphs (CUDA's or PyTorch's).
  bool python_extension = false;
};

// Why a symbol is refused, e.g. "process", "thread", "file", "network", "dynamic loading", "time",
// "signal", "library", or "not allowlisted". Empty when the import is allowed.
std::string classify_import(const std::string& symbol, const GatePolicy& policy);

// Empty when the shared object passes; otherwise one reason per offending symbol.
std::vector<Reason> check_shared_object(const std::filesystem::path& so_path, const GatePolicy& policy);

}  // namespace crucible::eval

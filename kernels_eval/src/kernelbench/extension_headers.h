#pragma once
// The trusted pieces a KernelBench extension is built with, made once per compile command and PyTorch and kept in
// the compile cache (or, where the unprivileged compiler cannot reach that, beside it in the system's temporary
// directory): a precompiled torch/extension.h for load_inline's own unit, and the lean kit (torch/types.h
// precompiled, a torch/extension.h that stands for it, Crucible's bindings header and the tensor glue object) for the
// unit with Crucible's bindings. Only PyTorch's headers and the project's own files go into them.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/compiler.h"

namespace crucible::eval {

// The compiler of lean units (CompileOptions::cxx): clang++ where it is installed (its precompiled headers keep
// their template instantiations; g++ redoes them in every unit), CRUCIBLE_KERNELBENCH_CXX where set (empty: g++).
std::string lean_unit_compiler();
// How lean_unit_compiler ranks a file name: clang++ first, then clang++-NN by version; -1 for any other name.
int clang_rank(const std::string& name);

// What every clang compile that uses such a header passes too (a header rewritten with the same text stays usable).
constexpr const char* kClangValidateContents = "-fpch-validate-input-files-content";

// torch/extension.h precompiled for `argv` (a g++ command without input and output); empty when it could not be made.
// A header that does not match is ignored by g++ (the build is then as slow as without, never wrong).
std::filesystem::path precompiled_extension_header(Compiler& compiler, std::vector<std::string> argv, Backend backend);

struct LeanKit {
  std::filesystem::path dir;           // -I: torch/extension.h (the stand-in) and crucible_bindings.h
  std::filesystem::path header;        // -include: Python.h and torch/types.h, precompiled beside it when possible
  std::filesystem::path glue_object;   // linked into every lean extension
};

// The lean kit for `argv` and `torch_versions` (the glue object is specific to one PyTorch build); nothing when the
// glue could not be compiled (the build then uses load_inline's own bindings).
std::optional<LeanKit> lean_extension_kit(Compiler& compiler, std::vector<std::string> argv, Backend backend,
                                          const std::string& torch_versions);

}  // namespace crucible::eval

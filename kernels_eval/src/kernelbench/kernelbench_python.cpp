// The Python (with PyTorch) that runs KernelBench workers, and what building an extension for it needs to know.
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The interpreters to probe, in order: the environment's choice alone, else Debian's (its python3-torch is what the
// CPU nodes have), then the first python3 on PATH (a GPU node's, with its own PyTorch).
std::vector<std::string> kernelbench_python_candidates() {
  if (const char* env = std::getenv("CRUCIBLE_KERNELBENCH_PYTHON")) return {env};
  std::vector<std::string> out;
  if (access("/usr/bin/python3", X_OK) == 0) out.push_back("/usr/bin/python3");
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const auto python = (fs::path(dir) / "python3").string();
    if (!dir.empty() && access(python.c_str(), X_OK) == 0 && python != "/usr/bin/python3") {
      out.push_back(python);
      break;
    }
  }
  return out;
}

constexpr const char* kProbe =
    "import json, site, sys, sysconfig\n"
    "try:\n    import torch\n    from torch.utils import cpp_extension\n"
    "except Exception as e:\n    print(json.dumps({'error': type(e).__name__ + ': ' + str(e)})); sys.exit(0)\n"
    "print(json.dumps({'versions': 'torch %s, python %s' % (torch.__version__, sys.version.split()[0]),"
    " 'cuda': torch.cuda.is_available(), 'executable': sys.executable,"
    " 'abi': int(torch._C._GLIBCXX_USE_CXX11_ABI),"
    " 'include': cpp_extension.include_paths() + [sysconfig.get_paths()['include']],"
    " 'lib': cpp_extension.library_paths(),"
    " 'dirs': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix} |"
    " set(site.getsitepackages()))}))\n";

std::optional<KernelBenchPython> probe(const std::string& python, std::string& why) {
  if (python.empty()) {
    why = "no python3 (set CRUCIBLE_KERNELBENCH_PYTHON to a Python with PyTorch)";
    return std::nullopt;
  }
  ProcessLimits limits;
  limits.wall_seconds = 120.0;
  ProcessResult r = run_process({python, "-I", "-c", kProbe}, limits);
  std::optional<json> j;
  std::stringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') j = json::parse(line, nullptr, false);
  if (!r.ok() || !j || j->is_discarded()) {
    why = python + " could not be asked for PyTorch: " + valid_utf8(r.output.substr(0, 300));
    return std::nullopt;
  }
  if (j->contains("error")) {
    why = python + " cannot import torch (" + (*j)["error"].get<std::string>() + ")";
    return std::nullopt;
  }
  KernelBenchPython p;
  p.executable = (*j)["executable"].get<std::string>();
  p.versions = (*j)["versions"].get<std::string>();
  p.cuda = (*j)["cuda"].get<bool>();
  p.cxx11_abi = (*j)["abi"].get<int>();
  p.dirs = (*j)["dirs"].get<std::vector<std::string>>();
  p.include_dirs = (*j)["include"].get<std::vector<std::string>>();
  p.library_dirs = (*j)["lib"].get<std::vector<std::string>>();
  return p;
}

}  // namespace

std::optional<KernelBenchPython> find_kernelbench_python(std::string& why, bool need_cuda) {
  static std::mutex mutex;
  static bool probed = false;
  static std::vector<KernelBenchPython> found;  // every candidate that imports PyTorch, in order
  static std::string reason;
  std::lock_guard<std::mutex> lock(mutex);
  if (!probed) {
    probed = true;
    const auto candidates = kernelbench_python_candidates();
    if (candidates.empty()) probe("", reason);
    for (const auto& python : candidates)
      if (auto p = probe(python, reason)) found.push_back(std::move(*p));  // else the last one's reason stays
  }
  for (const auto& p : found)
    if (p.cuda || !need_cuda) return p;
  why = found.empty() ? reason
                      : "no Python with a CUDA PyTorch (" + found.front().executable + " has " +
                            found.front().versions + " without a GPU): set CRUCIBLE_KERNELBENCH_PYTHON";
  return std::nullopt;
}

}  // namespace crucible::eval

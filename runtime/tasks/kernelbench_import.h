#pragma once
// KernelBench problems as Crucible tasks. The trusted import step runs the problem files in Python (PyTorch traces
// each Model to TorchScript and checks the trace against eager execution; tools/kernelbench/import_kernelbench.py);
// every task it writes is then loaded back here, so an imported task is one this build can evaluate.
#include <filesystem>
#include <string>
#include <vector>

namespace crucible::tasks {

struct KernelBenchImport {
  std::vector<std::filesystem::path> problems;  // directories (searched for level<N>/<id>_<Name>.py) or files
  std::filesystem::path out;                    // where the tasks' TOML and TorchScript files go
  std::vector<int> levels;                      // empty: every level
  std::string python = "/usr/bin/python3";      // an interpreter with PyTorch (Debian's python3-torch here)
  std::filesystem::path importer;               // the import program; empty: the checkout's
  double time_limit_s = 4 * 3600.0;
  double problem_time_limit_s = 180.0;          // one problem's import; past it, that problem is refused
  int jobs = 1;                                 // problems imported at once (CPU timings steer the CPU sizes)
  bool cuda = false;  // also trace at the written sizes on this machine's GPU, with its PyTorch (a GPU node)
};

struct Refusal {
  std::string problem;
  std::string reason;
};

struct ImportReport {
  std::vector<std::string> imported;  // task names, kb_l<level>_<id>
  std::vector<Refusal> refused;
  // With cuda: imported tasks whose written sizes were not traced on the GPU (they run at their CPU sizes only);
  // Refusal::problem holds the task's name.
  std::vector<Refusal> without_cuda_reference;
  double seconds = 0;
  // The import program's log: its progress and diagnostics, and whatever the problems' own code printed (the report
  // itself comes through a file of its own, so this text is never parsed). The first 16 MiB.
  std::string output;
};

// The import program shipped with this checkout.
std::filesystem::path default_kernelbench_importer();

// Throws std::invalid_argument for bad input (no such problem path, paths that hold no problem file, an interpreter
// without PyTorch) and std::runtime_error when the import program fails as a whole; a problem it cannot import is a
// refusal.
ImportReport import_kernelbench(const KernelBenchImport& request);

// {"imported": [...], "refused": [{"problem": ..., "reason": ...}]}, and with cuda
// "without_cuda_reference": [{"task": ..., "reason": ...}]
std::string report_json(const ImportReport& report);

}  // namespace crucible::tasks

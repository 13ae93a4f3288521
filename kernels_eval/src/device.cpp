#include "crucible/eval/device.h"
#include "crucible/eval/eval_settings.h"

#include <climits>

namespace crucible::eval {

std::string_view backend_name(Backend backend) { return backend == Backend::cuda ? "cuda" : "cpu"; }

Backend parse_backend(std::string_view text) {
  if (text == "cpu") return Backend::cpu;
  if (text == "cuda") return Backend::cuda;
  throw std::invalid_argument("unknown backend '" + std::string(text) + "' (cpu, cuda)");
}

namespace {

// Each kind: its name, and the file extension of its sources; empty: the backend's own (native C++ or CUDA C++).
struct KindRow {
  CandidateKind kind;
  std::string_view name, extension;
};
constexpr KindRow kKinds[] = {
    {CandidateKind::native, "native", ""},
    {CandidateKind::triton, "triton", "py"},
    {CandidateKind::kernelbench, "kernelbench", "py"},
};

const KindRow& row_of(CandidateKind kind) {
  for (const auto& row : kKinds)
    if (row.kind == kind) return row;
  return kKinds[0];
}

}  // namespace

std::string_view source_extension(Backend backend, CandidateKind kind) {
  const auto& row = row_of(kind);
  if (!row.extension.empty()) return row.extension;
  return backend == Backend::cuda ? "cu" : "cpp";
}

std::string_view candidate_language(Backend backend, CandidateKind kind) {
  return kind == CandidateKind::native ? backend_name(backend) : row_of(kind).name;
}

std::string_view candidate_kind_name(CandidateKind kind) { return row_of(kind).name; }

CandidateKind parse_candidate_kind(std::string_view text) {
  std::string known;
  for (const auto& row : kKinds) {
    if (row.name == text) return row.kind;
    known += (known.empty() ? "" : " or ") + std::string(row.name);
  }
  throw std::invalid_argument("unknown candidate kind '" + std::string(text) + "' (expected " + known + ")");
}

std::string Device::name() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

Device parse_device(std::string_view text, bool allow_bare_cuda) {
  if (text == "cpu") return Device::cpu();
  if (allow_bare_cuda && text == "cuda") return Device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.substr(0, prefix.size()) == prefix && text.size() > prefix.size() && text.size() <= prefix.size() + 6) {
    long ordinal = 0;
    for (char c : text.substr(prefix.size())) {
      if (c < '0' || c > '9') throw std::invalid_argument("unknown device '" + std::string(text) + "' (cpu, cuda:N)");
      ordinal = ordinal * 10 + (c - '0');
    }
    return Device::cuda(static_cast<int>(ordinal));
  }
  throw std::invalid_argument("unknown device '" + std::string(text) + "' (cpu, cuda:N)");
}

std::string_view eval_depth_name(EvalDepth depth) { return depth == EvalDepth::full ? "full" : "fast"; }

EvalDepth parse_eval_depth(std::string_view text) {
  if (text == "fast") return EvalDepth::fast;
  if (text == "full") return EvalDepth::full;
  throw std::invalid_argument("unknown mode '" + std::string(text) + "' (fast, full)");
}

std::string_view launches_name(Launches launches) { return launches == Launches::queued ? "queued" : "eager"; }

Launches parse_launches(std::string_view text) {
  if (text == "eager") return Launches::eager;
  if (text == "queued") return Launches::queued;
  throw std::invalid_argument("unknown launches '" + std::string(text) + "' (eager, queued)");
}

bool parse_forbid_torch_ops(std::string_view text) {
  if (text == "allow") return false;
  if (text == "forbid") return true;
  throw std::invalid_argument("unknown torch_ops '" + std::string(text) + "' (allow, forbid)");
}

std::string_view torch_ops_name(bool forbid_torch_ops) { return forbid_torch_ops ? "forbid" : "allow"; }

EvalOptions options_for(const RunEvalSettings& run, Device device) {
  EvalOptions options;
  static_cast<RunEvalSettings&>(options) = run;
  options.device = device;
  return options;
}

}  // namespace crucible::eval

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

std::string_view source_extension(Backend backend, CandidateKind kind) {
  if (kind == CandidateKind::triton || kind == CandidateKind::kernelbench) return "py";
  return backend == Backend::cuda ? "cu" : "cpp";
}

std::string_view candidate_kind_name(CandidateKind kind) {
  switch (kind) {
    case CandidateKind::triton: return "triton";
    case CandidateKind::kernelbench: return "kernelbench";
    case CandidateKind::native: break;
  }
  return "native";
}

CandidateKind parse_candidate_kind(std::string_view text) {
  if (text == "native") return CandidateKind::native;
  if (text == "triton") return CandidateKind::triton;
  if (text == "kernelbench") return CandidateKind::kernelbench;
  throw std::invalid_argument("unknown candidate kind '" + std::string(text) +
                              "' (expected native, triton or kernelbench)");
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

std::string_view mode_name(Mode mode) { return mode == Mode::full ? "full" : "fast"; }

Mode parse_mode(std::string_view text) {
  if (text == "fast") return Mode::fast;
  if (text == "full") return Mode::full;
  throw std::invalid_argument("unknown mode '" + std::string(text) + "' (fast, full)");
}

std::string_view launches_name(Launches launches) { return launches == Launches::queued ? "queued" : "eager"; }

Launches parse_launches(std::string_view text) {
  if (text == "eager") return Launches::eager;
  if (text == "queued") return Launches::queued;
  throw std::invalid_argument("unknown launches '" + std::string(text) + "' (eager, queued)");
}

}  // namespace crucible::eval

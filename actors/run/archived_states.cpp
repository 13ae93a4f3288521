#include "actors/run/archived_states.h"

#include <nlohmann/json.hpp>

#include "config/text_file.h"
#include "run/jsonl.h"
#include "run/run_directory.h"

namespace crucible::node {

namespace {

using nlohmann::json;

template <class T>
T value_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

}  // namespace

std::vector<actors::CoordinatorSetup::ArchivedState> archived_states(const std::filesystem::path& seed_dir) {
  std::vector<actors::CoordinatorSetup::ArchivedState> out;
  for (const auto& r : run::read_jsonl(seed_dir / "candidates.jsonl", /*skip_malformed=*/true)) {
    if (!r.contains("candidate_id") || !r.contains("status")) continue;
    eval::Verdict v;
    try {
      v.status = eval::parse_status(value_or<std::string>(r, "status", ""));
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (r.contains("reasons") && r["reasons"].is_array())
      for (const auto& reason : r["reasons"])
        v.reasons.push_back(eval::reason_from_text(value_or<std::string>(reason, "code", ""),
                                                   value_or<std::string>(reason, "detail", "")));
    if (!v.reasons.empty() && v.reasons.front().code == eval::ReasonCode::policy_error) continue;
    if (r.contains("speedup") && r["speedup"].is_number()) v.speedup = r["speedup"].get<double>();
    if (r.contains("verdict") && r["verdict"].is_object()) {
      const auto& verdict = r["verdict"];
      if (verdict.contains("kernel_coverage") && verdict["kernel_coverage"].is_number())
        v.kernel_coverage = verdict["kernel_coverage"].get<double>();
      if (verdict.contains("compile") && verdict["compile"].is_object())
        v.compile.log_excerpt = value_or<std::string>(verdict["compile"], "log_excerpt", "");
    }
    messages::Candidate c;
    c.id = value_or<uint64_t>(r, "candidate_id", 0);
    c.step = value_or<uint64_t>(r, "step", 0);
    c.task = value_or<std::string>(r, "task", "");
    c.group = value_or<uint64_t>(r, "group", 0);
    c.index = value_or<uint32_t>(r, "index", 0);
    c.policy_version = value_or<uint64_t>(r, "policy_version", 0);
    c.output = value_or<std::string>(r, "policy_output", "");
    c.tokens = value_or<std::vector<int32_t>>(r, "tokens", {});
    c.logprobs = value_or<std::vector<float>>(r, "logprobs", {});
    c.trajectory = value_or<uint64_t>(r, "trajectory", c.id);
    c.turn = value_or<uint32_t>(r, "turn", 0);
    c.parent = value_or<int64_t>(r, "parent", -1);
    if (const auto file = value_or<std::string>(r, "source_file", ""); run::is_recorded_source_path(file)) {
      try {
        c.source = config::read_text_file(seed_dir / file);
      } catch (const std::exception&) {
        // A source the run no longer has: the state keeps its reply, which is what it was deduplicated by too.
      }
    }
    if (v.status == eval::Status::parse_error) c.parse_error = v.reasons.empty() ? "" : v.reasons.front().detail;
    out.push_back({std::move(c), std::move(v), value_or<double>(r, "reward", 0.0)});
  }
  return out;
}

}  // namespace crucible::node

#include "crucible/eval/verdict_json.h"

#include <nlohmann/json.hpp>

namespace crucible::eval {
namespace {
using json = nlohmann::ordered_json;

json timing(const TimingStats& t) {
  return {{"trials", t.trials}, {"median_us", t.median_us}, {"mean_us", t.mean_us},
          {"min_us", t.min_us}, {"max_us", t.max_us},       {"cv", t.cv},
          {"retaken", t.retaken}};
}
}  // namespace

std::string to_json(const Verdict& v, int indent) {
  json j;
  j["status"] = std::string(status_name(v.status));
  j["task"] = v.task;
  // A verdict reached without evaluating names the policy whose reply it is about, as records always have.
  j["device"] = v.device ? v.device->name() : "policy";
  j["mode"] = v.mode ? std::string(eval_depth_name(*v.mode)) : "";
  j["launches"] = std::string(launches_name(v.launches));
  j["threads"] = v.threads;
  j["seed"] = v.seed;
  json reasons = json::array();
  for (const auto& r : v.reasons) reasons.push_back({{"code", reason_code_name(r.code)}, {"detail", r.detail}});
  j["reasons"] = reasons;
  j["compile"] = {{"cached", v.compile.cached},
                  {"seconds", v.compile.seconds},
                  {"hash", v.compile.hash},
                  {"log_excerpt", v.compile.log_excerpt}};
  json trials = json::array();
  for (const auto& t : v.trials)
    trials.push_back({{"trial", t.trial},
                      {"passed", t.passed},
                      {"max_abs_error", t.max_abs_error},
                      {"max_rel_error", t.max_rel_error},
                      {"mismatched", t.mismatched},
                      {"elements", t.elements}});
  j["correctness"] = trials;
  j["candidate_time"] = v.candidate_time ? timing(*v.candidate_time) : json(nullptr);
  j["reference_time"] = v.reference_time ? timing(*v.reference_time) : json(nullptr);
  j["kernel_coverage"] = v.kernel_coverage ? json(*v.kernel_coverage) : json(nullptr);
  j["candidate_event_median_us"] = v.candidate_event_median_us ? json(*v.candidate_event_median_us) : json(nullptr);
  j["speedup"] = v.speedup ? json(*v.speedup) : json(nullptr);
  j["speedup_spread"] = v.speedup_spread ? json(*v.speedup_spread) : json(nullptr);
  if (!v.shapes.empty()) {
    json shapes = json::array();
    for (const auto& s : v.shapes)
      shapes.push_back({{"name", s.name}, {"candidate_us", s.candidate_us}, {"reference_us", s.reference_us},
                        {"cv", s.cv}, {"reference_cv", s.reference_cv}});
    j["shapes"] = shapes;
  }
  j["gflops"] = v.gflops ? json(*v.gflops) : json(nullptr);
  j["gbps"] = v.gbps ? json(*v.gbps) : json(nullptr);
  const auto& s = v.stages;
  j["stages"] = {{"compile_s", s.compile_s},         {"gate_s", s.gate_s},   {"load_s", s.load_s},
                 {"correctness_s", s.correctness_s}, {"timing_s", s.timing_s}, {"total_s", s.total_s},
                 {"kernel_s", s.kernel_s},           {"overhead_s", s.overhead_s}};
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace crucible::eval

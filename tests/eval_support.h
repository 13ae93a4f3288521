#pragma once
// Helpers for suites that run the evaluator: one with its own compile cache, and a verdict in one line.
#include <string>

#include "crucible/eval/evaluator.h"
#include "support.h"

namespace crucible::test {

// An evaluator with its own compile cache, removed afterwards.
struct TestEvaluator {
  explicit TestEvaluator(const std::string& tag) : cache(tag), evaluator([&] {
    eval::EvaluatorConfig config;
    config.cache_dir = cache.path();
    return config;
  }()) {}
  ScratchDir cache;
  eval::Evaluator evaluator;
};

inline std::string detail_of(const eval::Verdict& v) {
  std::string s = std::string(eval::status_name(v.status)) + ":";
  for (const auto& r : v.reasons) s += " [" + std::string(eval::reason_code_name(r.code)) + "] " + r.detail;
  return s;
}

// Evaluation on the first GPU at a size set, with limits a test can afford.
inline eval::EvalOptions gpu_options(const std::string& sizes, double call_timeout_s = 5.0,
                                     double compile_time_limit_s = 60.0) {
  eval::EvalOptions o;
  o.device = eval::Device::cuda(0);
  o.sizes = sizes;
  o.call_timeout_s = call_timeout_s;
  o.compile.time_limit_s = compile_time_limit_s;
  return o;
}

}  // namespace crucible::test

#include "crucible/eval/verdict.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace crucible::eval {

std::string_view status_name(Status s) {
  switch (s) {
    case Status::correct: return "correct";
    case Status::incorrect: return "incorrect";
    case Status::compile_error: return "compile_error";
    case Status::rejected: return "rejected";
    case Status::runtime_error: return "runtime_error";
    case Status::timeout: return "timeout";
    case Status::parse_error: return "parse_error";
  }
  return "runtime_error";
}

Status parse_status(std::string_view name) {
  for (Status s : {Status::correct, Status::incorrect, Status::compile_error, Status::rejected, Status::runtime_error,
                   Status::timeout, Status::parse_error})
    if (status_name(s) == name) return s;
  throw std::invalid_argument("unknown verdict status '" + std::string(name) + "'");
}

Reason reason_from_text(std::string_view code, std::string detail) {
  if (auto known = parse_reason_code(code)) return {*known, std::move(detail)};
  return {ReasonCode::unrecognized, std::string(code) + ": " + detail};
}

bool Verdict::has_reason(ReasonCode code) const {
  return std::any_of(reasons.begin(), reasons.end(), [&](const Reason& r) { return r.code == code; });
}

Verdict verdict_without_evaluation(std::string task, std::optional<Device> device, Status status, ReasonCode code,
                                   std::string detail) {
  Verdict v;
  v.task = std::move(task);
  v.device = device;
  v.status = status;
  v.reasons.push_back({code, std::move(detail)});
  return v;
}

TimingStats summarize_times(std::vector<double> samples_us) {
  TimingStats s;
  s.trials = static_cast<int>(samples_us.size());
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  std::size_t n = samples_us.size();
  s.median_us = n % 2 ? samples_us[n / 2] : 0.5 * (samples_us[n / 2 - 1] + samples_us[n / 2]);
  s.min_us = samples_us.front();
  s.max_us = samples_us.back();
  s.mean_us = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) / static_cast<double>(n);
  double var = 0.0;
  for (double x : samples_us) var += (x - s.mean_us) * (x - s.mean_us);
  var /= static_cast<double>(n > 1 ? n - 1 : 1);
  s.cv = s.mean_us > 0 ? std::sqrt(var) / s.mean_us : 0.0;
  return s;
}

}  // namespace crucible::eval

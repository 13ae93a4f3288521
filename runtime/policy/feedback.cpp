#include "policy/feedback.h"

#include <cstdio>

#include "crucible/eval/utf8_text.h"

namespace crucible::policy {
namespace {

// Valid UTF-8, no control characters except newline and tab, at most `max_bytes` (cut at a character boundary).
std::string bounded(const std::string& text, std::size_t max_bytes) {
  std::string clean;
  for (unsigned char c : eval::valid_utf8(text))
    if (c >= 0x20 || c == '\n' || c == '\t') clean += static_cast<char>(c);
  if (clean.size() <= max_bytes) return clean;
  return eval::valid_utf8_prefix(clean, max_bytes) + " [...]";
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

}  // namespace

Feedback feedback_of(const eval::Verdict& v) {
  Feedback f;
  f.status = v.status;
  if (!v.reasons.empty()) {
    f.reason = v.reasons.front().code;
    f.detail = bounded(v.reasons.front().detail, kFeedbackDetailBytes);
  }
  if (v.status == eval::Status::compile_error) f.compile_log = bounded(v.compile.log_excerpt, kFeedbackLogBytes);
  f.speedup = v.speedup;
  f.kernel_coverage = v.kernel_coverage;
  return f;
}

std::string feedback_text(const Feedback& f) {
  std::string out = "The evaluator's verdict on your previous kernel:\n";
  out += "status: " + std::string(eval::status_name(f.status));
  if (f.reason) out += " (" + std::string(eval::reason_code_name(*f.reason)) + ")";
  out += "\n";
  if (!f.detail.empty()) out += "detail: " + bounded(f.detail, kFeedbackDetailBytes) + "\n";
  if (!f.compile_log.empty()) out += "compiler output:\n" + bounded(f.compile_log, kFeedbackLogBytes) + "\n";
  if (f.status == eval::Status::correct) {
    out += "speedup over the reference: " + (f.speedup ? fixed(*f.speedup, 3) + "x" : std::string("not measured")) + "\n";
    out += "kernel time coverage: " +
           (f.kernel_coverage ? fixed(100.0 * *f.kernel_coverage, 1) + "% of GPU time in your own kernels"
                              : std::string("unavailable")) +
           "\n";
  }
  out += f.status == eval::Status::correct ? "Write a faster kernel that stays correct.\n"
                                           : "Fix the kernel so that it compiles, runs and matches the reference.\n";
  return out;
}

}  // namespace crucible::policy

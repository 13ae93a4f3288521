#include "judge/judge_reply.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "crucible/eval/utf8_text.h"
#include "policy/feedback.h"

namespace crucible::judge {
using nlohmann::json;

std::string judge_prompt(const eval::TaskSpec& task, const std::string& source, const eval::Verdict& verdict) {
  constexpr std::size_t kSourceBytes = 16 * 1024;
  std::string code = source.size() > kSourceBytes ? eval::valid_utf8_prefix(source, kSourceBytes) + "\n// [cut]" : source;
  return "You review a kernel written for this task.\nTask: " + task.name + "\n" + task.description +
         "\n\nThe kernel:\n```\n" + eval::valid_utf8(code) + "\n```\n\n" +
         policy::feedback_text(policy::feedback_of(verdict)) +
         "\nJudge how close the kernel is to a correct and fast implementation (a sound approach, the right "
         "algorithm, no shortcuts that skip work). Reply with one JSON object and nothing else: "
         "{\"score\": <a number from 0 to 1>, \"reason\": \"<one sentence>\"}\n";
}

std::optional<JudgeScore> parse_judge_reply(const std::string& reply, std::string& why) {
  // Every '{' is a possible start; the first that parses as an object with a numeric score counts.
  for (std::size_t open = reply.find('{'); open != std::string::npos; open = reply.find('{', open + 1)) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (std::size_t i = open; i < reply.size(); ++i) {
      const char c = reply[i];
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      else if (c == '{') ++depth;
      else if (c == '}' && --depth == 0) {
        const json j = json::parse(reply.substr(open, i - open + 1), nullptr, false);
        if (j.is_object() && j.contains("score") && j["score"].is_number()) {
          const double score = j["score"].get<double>();
          if (!(score >= 0.0 && score <= 1.0)) {
            why = "the judge's score " + j["score"].dump() + " is outside 0..1";
            return std::nullopt;
          }
          JudgeScore out{score, ""};
          if (j.contains("reason") && j["reason"].is_string())
            out.reason = eval::valid_utf8_prefix(eval::valid_utf8(j["reason"].get<std::string>()), 500);
          return out;
        }
        break;
      }
    }
  }
  why = "the judge's reply holds no JSON object with a numeric \"score\"";
  return std::nullopt;
}

GroupJudgement judge_samples(const Judge& judge, const eval::TaskSpec& task, const std::vector<std::string>& sources,
                             const std::vector<eval::Verdict>& verdicts, int concurrency, uint64_t seed) {
  GroupJudgement out;
  out.scores.assign(verdicts.size(), std::nan(""));
  out.notes.assign(verdicts.size(), "");
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < verdicts.size();) {
      const auto result = judge.judge(task, i < sources.size() ? sources[i] : "", verdicts[i], seed + i);
      if (result.score) out.scores[i] = result.score->score, out.notes[i] = result.score->reason;
      else out.notes[i] = result.error;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(concurrency, static_cast<int>(verdicts.size())); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

bool judge_group(double correct_share, double when_correct_below) { return correct_share < when_correct_below; }

}  // namespace crucible::judge

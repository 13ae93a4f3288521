#pragma once
// LLM-as-judge, the plain part: what a judge model is asked about a candidate and how its reply is read. The reply
// format (documented in docs/experiments.md): one JSON object {"score": <number from 0 to 1>, "reason": "<text>"};
// the first such object anywhere in the reply counts (models wrap it in prose or a code fence).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"
#include "crucible/eval/verdict.h"

namespace crucible::judge {

struct JudgeScore {
  double score = 0.0;  // 0..1
  std::string reason;  // bounded, valid UTF-8
};

// The judge's user prompt: the task, the candidate's source (cut to 16 KB) and the evaluator's verdict.
std::string judge_prompt(const eval::TaskSpec& task, const std::string& source, const eval::Verdict& verdict);

// The score in a reply, or nothing with `why` set (no JSON object with a numeric "score", or one outside 0..1).
std::optional<JudgeScore> parse_judge_reply(const std::string& reply, std::string& why);

// What judging one candidate gave: a score, or the failure (a dead server, an unreadable reply), never both.
struct JudgeResult {
  std::optional<JudgeScore> score;
  std::string error;
};

// A judge model behind any backend (openai_policy/ has the served one). Thread-safe; never throws for what the
// model does.
class Judge {
 public:
  virtual ~Judge() = default;
  virtual JudgeResult judge(const eval::TaskSpec& task, const std::string& source, const eval::Verdict& verdict,
                            uint64_t seed) const = 0;
};

// Every sample of a group judged, `concurrency` at a time: per sample a score (NaN where judging failed) and a note
// (the judge's reason, or why it failed).
struct GroupJudgement {
  std::vector<double> scores;
  std::vector<std::string> notes;
};
GroupJudgement judge_samples(const Judge& judge, const eval::TaskSpec& task, const std::vector<std::string>& sources,
                             const std::vector<eval::Verdict>& verdicts, int concurrency, uint64_t seed);

// Whether a group is judged: while its share of correct samples is below `when_correct_below` (1 judges every group
// that is not all correct; above 1, every group).
bool judge_group(double correct_share, double when_correct_below);

}  // namespace crucible::judge

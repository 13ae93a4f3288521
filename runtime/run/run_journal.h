#pragma once
// The journal's line format: one {"event":"commit",...} object per committed unit, in commit order.
#include <cstddef>
#include <string>
#include <vector>

namespace crucible::run {

struct CommitRecord {
  std::size_t index = 0;  // 1 for the run's first commit
  std::string unit;
  bool has_policy_snapshot = false;  // policy/<index>.json was written before this line
};

std::string commit_line(const CommitRecord& commit);  // ends with '\n'

struct Journal {
  std::vector<CommitRecord> commits;
  std::size_t valid_bytes = 0;  // the prefix of the text that holds exactly `commits`
};

// Lines that do not parse at the end of the text (a write torn by a crash) are left out of `valid_bytes`; a bad
// line followed by good ones, a repeated unit or an index out of sequence is corruption: RunError.
Journal parse_journal(const std::string& text);

}  // namespace crucible::run

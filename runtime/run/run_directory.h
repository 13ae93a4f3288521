#pragma once
// The on-disk record of one run, laid out so that a crashed run can be resumed without repeating or half-keeping
// any unit of work:
//   experiment.toml    copy of the experiment text
//   candidates.jsonl   one JSON object per candidate, each with "unit"
//   sources/<sha256>.<ext>  candidate sources, stored once by content
//   steps.jsonl        metrics, one line per committed unit
//   journal.jsonl      append-only, one {"event":"commit",...} line per finished unit; the source of truth
//   policy/<n>.json    policy snapshot stored with commit n (commits count from 1)
//   cluster.jsonl      evaluator nodes that joined, were lost (and what was re-queued), late results discarded
//   logs/<actor>.log   per-actor logs, written by the logging facade (the run's top level, shared by its seeds);
//   logs/nodes/<node>/<actor>.log  the same from each evaluator node
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run/run_error.h"

namespace crucible::run {

class RunDirectory {
 public:
  // New run: creates dir (refuses a dir that exists and is not empty: RunError), writes experiment.toml.
  static RunDirectory create(const std::filesystem::path& dir, const std::string& experiment_text);
  // Existing run: reads the journal (a torn last line from a crash is ignored and cut off), then rewrites
  // candidates.jsonl and steps.jsonl atomically keeping only lines whose "unit" is committed, so a unit that was in
  // flight at the crash leaves nothing behind and is redone from scratch. RunError if dir is not a run dir.
  static RunDirectory resume(const std::filesystem::path& dir);

  RunDirectory(RunDirectory&&) noexcept;
  RunDirectory& operator=(RunDirectory&&) noexcept;
  ~RunDirectory();

  const std::filesystem::path& dir() const;
  std::string experiment_text() const;
  // Unit names in commit order. Not synchronised with a concurrent commit().
  const std::vector<std::string>& committed() const;
  bool is_committed(const std::string& unit) const;
  // The snapshot stored with the last commit that had one.
  std::optional<std::string> last_policy_snapshot() const;

  // Writes sources/<sha256 of source>.<extension> once (extension with or without its dot); returns the hex hash.
  // Thread-safe.
  std::string write_source(const std::string& source, const std::string& extension);
  // Appends `record` (a JSON object's text) to candidates.jsonl with "unit": unit added. Thread-safe; flushed to the
  // OS (a kill -9 loses nothing), made durable by the unit's commit. RunError for a committed unit, a record that is
  // not a JSON object, or one whose own "unit" differs.
  void append_candidate(const std::string& unit, const std::string& record);
  // Durably ends a unit: appends metrics (JSON object text, "unit" added) to steps.jsonl, writes the policy snapshot
  // (if non-empty) to policy/<commit index>.json, then appends the journal line and fsyncs. Committing a unit twice
  // is a RunError (no step repeated). Thread-safe.
  void commit(const std::string& unit, const std::string& metrics, const std::string& policy_snapshot);

 private:
  struct State;
  explicit RunDirectory(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Whether a record's source_file is one the run writes (a relative path under sources/). Records of a run
// directory from elsewhere may name anything; readers check this before opening the file.
bool is_recorded_source_path(const std::string& file);

}  // namespace crucible::run

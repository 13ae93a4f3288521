#include "run/run_directory.h"

#include <nlohmann/json.hpp>

#include <mutex>
#include <unordered_set>

#include "crucible/eval/compiler.h"
#include "run/durable_file.h"
#include "run/run_journal.h"

namespace crucible::run {
namespace fs = std::filesystem;

namespace {

constexpr const char* kExperiment = "experiment.toml";
constexpr const char* kCandidates = "candidates.jsonl";
constexpr const char* kSteps = "steps.jsonl";
constexpr const char* kJournal = "journal.jsonl";
constexpr const char* kSources = "sources";
constexpr const char* kPolicy = "policy";

fs::path policy_file(const fs::path& dir, std::size_t index) {
  return dir / kPolicy / (std::to_string(index) + ".json");
}

// `json_object` with "unit" put first; RunError if it is not an object or names another unit.
std::string with_unit(const std::string& unit, const std::string& json_object, const char* what) {
  auto parsed = nlohmann::ordered_json::parse(json_object, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) throw RunError(std::string(what) + " for unit '" + unit + "' is not a JSON object");
  if (auto own = parsed.find("unit"); own != parsed.end() && *own != unit)
    throw RunError(std::string(what) + " names unit " + own->dump() + " but is stored under '" + unit + "'");
  nlohmann::ordered_json line;
  line["unit"] = unit;
  for (auto& [key, value] : parsed.items())
    if (key != "unit") line[key] = std::move(value);
  try {
    return line.dump() + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw RunError(std::string(what) + " for unit '" + unit + "': " + e.what());
  }
}

// Keeps the lines of a JSON-lines file whose "unit" is committed; anything else (an in-flight unit, a torn line) goes.
std::string committed_lines_only(const std::string& text, const std::unordered_set<std::string>& committed) {
  std::string kept;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // torn by a crash
    std::string line = text.substr(start, end - start);
    start = end + 1;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    auto unit = j.find("unit");
    if (unit != j.end() && unit->is_string() && committed.count(unit->get<std::string>())) kept += line + "\n";
  }
  return kept;
}

bool is_temporary(const fs::path& p) { return p.filename().string().find(".tmp.") != std::string::npos; }

// Leftovers of a crash: temporary files and snapshots of commits the journal never recorded.
void remove_debris(const fs::path& dir, std::size_t commits) {
  for (const auto* sub : {"", kSources, kPolicy}) {
    fs::path folder = *sub ? dir / sub : dir;
    if (!fs::is_directory(folder)) continue;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const auto& p = entry.path();
      bool orphan_snapshot = false;
      if (*sub && std::string(sub) == kPolicy && p.extension() == ".json") {
        auto stem = p.stem().string();
        orphan_snapshot = !stem.empty() && stem.find_first_not_of("0123456789") == std::string::npos &&
                          std::stoull(stem) > commits;
      }
      if (entry.is_regular_file() && (is_temporary(p) || orphan_snapshot)) fs::remove(p);
    }
  }
}

}  // namespace

struct RunDirectory::State {
  fs::path dir;
  mutable std::mutex mutex;
  std::vector<std::string> committed;
  std::unordered_set<std::string> committed_set;
  std::optional<std::size_t> last_snapshot_index;
  bool commit_failed = false;  // a commit stopped half-way; only resume() can sort its lines out
  AppendFile candidates;
  AppendFile steps;
  AppendFile journal;

  explicit State(fs::path d)
      : dir(std::move(d)), candidates(dir / kCandidates), steps(dir / kSteps), journal(dir / kJournal) {}
};

RunDirectory::RunDirectory(std::unique_ptr<State> state) : state_(std::move(state)) {}
RunDirectory::RunDirectory(RunDirectory&&) noexcept = default;
RunDirectory& RunDirectory::operator=(RunDirectory&&) noexcept = default;
RunDirectory::~RunDirectory() = default;

RunDirectory RunDirectory::create(const fs::path& dir, const std::string& experiment_text) {
  std::error_code ec;
  if (fs::exists(dir, ec) && (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)))
    throw RunError("cannot start a run in " + dir.string() + ": it exists and is not an empty directory");
  for (const auto* sub : {kSources, kPolicy}) {
    fs::create_directories(dir / sub, ec);
    if (ec) throw RunError("cannot create " + (dir / sub).string() + ": " + ec.message());
  }
  auto state = std::make_unique<State>(dir);
  // Written last: a directory without it is not a run, so a crash during create never leaves a half-made run.
  replace_file(dir / kExperiment, experiment_text);
  return RunDirectory(std::move(state));
}

RunDirectory RunDirectory::resume(const fs::path& dir) {
  if (!fs::is_regular_file(dir / kExperiment) || !fs::is_regular_file(dir / kJournal))
    throw RunError(dir.string() + " is not a run directory (no " + kExperiment + " and " + kJournal + ")");
  auto journal_text = read_whole_file(dir / kJournal);
  Journal journal;
  try {
    journal = parse_journal(journal_text);
  } catch (const RunError& e) {
    throw RunError((dir / kJournal).string() + ": " + e.what());
  }
  // Cut a torn tail off, or the next commit line would be glued onto it.
  if (journal.valid_bytes < journal_text.size())
    replace_file(dir / kJournal, journal_text.substr(0, journal.valid_bytes));

  std::unordered_set<std::string> committed;
  for (const auto& c : journal.commits) committed.insert(c.unit);
  for (const auto* name : {kCandidates, kSteps}) {
    auto path = dir / name;
    replace_file(path, fs::exists(path) ? committed_lines_only(read_whole_file(path), committed) : std::string());
  }
  remove_debris(dir, journal.commits.size());
  for (const auto* sub : {kSources, kPolicy}) fs::create_directories(dir / sub);

  auto state = std::make_unique<State>(dir);
  for (const auto& c : journal.commits) {
    state->committed.push_back(c.unit);
    if (c.has_policy_snapshot) state->last_snapshot_index = c.index;
  }
  state->committed_set = std::move(committed);
  return RunDirectory(std::move(state));
}

const fs::path& RunDirectory::dir() const { return state_->dir; }


std::string RunDirectory::experiment_text() const { return read_whole_file(state_->dir / kExperiment); }

const std::vector<std::string>& RunDirectory::committed() const { return state_->committed; }

bool RunDirectory::is_committed(const std::string& unit) const {
  std::lock_guard lock(state_->mutex);
  return state_->committed_set.count(unit) > 0;
}

std::optional<std::string> RunDirectory::last_policy_snapshot() const {
  std::optional<std::size_t> index;
  {
    std::lock_guard lock(state_->mutex);
    index = state_->last_snapshot_index;
  }
  if (!index) return std::nullopt;
  return read_whole_file(policy_file(state_->dir, *index));
}

std::string RunDirectory::write_source(const std::string& source, const std::string& extension) {
  std::string ext = !extension.empty() && extension.front() == '.' ? extension.substr(1) : extension;
  if (ext.find('/') != std::string::npos) throw RunError("bad source extension '" + extension + "'");
  std::string hash = eval::sha256_hex(source);
  auto path = state_->dir / kSources / (ext.empty() ? hash : hash + "." + ext);
  // No lock needed: every writer of this name writes the same bytes and replace_file renames atomically.
  if (!fs::exists(path)) replace_file(path, source);
  return hash;
}

void RunDirectory::append_candidate(const std::string& unit, const std::string& record) {
  std::string line = with_unit(unit, record, "candidate record");
  std::lock_guard lock(state_->mutex);
  if (state_->committed_set.count(unit))
    throw RunError("cannot add a candidate to unit '" + unit + "': it is already committed");
  state_->candidates.append(line);
}

void RunDirectory::commit(const std::string& unit, const std::string& metrics, const std::string& policy_snapshot) {
  std::string line = with_unit(unit, metrics, "metrics");
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  if (s.commit_failed) throw RunError("an earlier commit failed half-way; resume the run directory to go on");
  if (s.committed_set.count(unit)) throw RunError("unit '" + unit + "' is already committed");
  CommitRecord record{s.committed.size() + 1, unit, !policy_snapshot.empty()};
  try {
    // Everything the journal line vouches for is on disk before the line itself.
    s.candidates.sync();
    s.steps.append(line);
    s.steps.sync();
    if (record.has_policy_snapshot) replace_file(policy_file(s.dir, record.index), policy_snapshot);
    s.journal.append(commit_line(record));
    s.journal.sync();
  } catch (...) {
    s.commit_failed = true;
    throw;
  }
  s.committed.push_back(unit);
  s.committed_set.insert(unit);
  if (record.has_policy_snapshot) s.last_snapshot_index = record.index;
}

bool is_recorded_source_path(const std::string& file) {
  const fs::path p(file);
  if (file.empty() || p.is_absolute() || *p.begin() != kSources) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace crucible::run

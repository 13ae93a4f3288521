#include "policy/replay_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace crucible::policy {
namespace fs = std::filesystem;

ReplayPolicy::ReplayPolicy(fs::path dir, eval::CandidateLanguage language)
    : dir_(std::move(dir)), extension_(eval::source_extension(language.backend, language.kind)) {
  if (!fs::is_directory(dir_)) throw std::invalid_argument("replay policy: no directory " + dir_.string());
}

std::vector<fs::path> ReplayPolicy::files_for(const std::string& task) const {
  std::vector<fs::path> files;
  const fs::path task_dir = dir_ / task;
  if (!fs::is_directory(task_dir)) return files;
  for (const auto& entry : fs::directory_iterator(task_dir))
    if (entry.is_regular_file() && entry.path().extension() == "." + extension_) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<Sample> ReplayPolicy::sample(const eval::TaskSpec& task, int n) {
  const auto files = files_for(task.name);
  if (files.empty())
    throw std::invalid_argument("replay policy: no *." + extension_ + " files in " + (dir_ / task.name).string());
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    const uint64_t index = next_[task.name]++ % files.size();
    std::ifstream in(files[index]);
    std::stringstream text;
    text << in.rdbuf();
    Sample s;
    s.task = task.name;
    s.output = files[index].filename().string();
    s.source = text.str();
    s.tokens = {static_cast<int32_t>(index)};
    s.policy_version = version_;
    out.push_back(std::move(s));
  }
  return out;
}

void ReplayPolicy::update(const std::vector<Sample>& samples, const std::vector<double>& advantages) {
  if (samples.size() != advantages.size()) throw std::invalid_argument("update: one advantage per sample");
  ++version_;
}

std::string ReplayPolicy::snapshot() const {
  return nlohmann::json{{"kind", "replay"}, {"version", version_}, {"next", next_}}.dump();
}

void ReplayPolicy::restore(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    version_ = j.at("version").get<uint64_t>();
    next_ = j.at("next").get<std::map<std::string, uint64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("malformed replay-policy snapshot: ") + e.what());
  }
}

}  // namespace crucible::policy

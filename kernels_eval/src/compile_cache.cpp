#include "crucible/eval/compile_cache.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace crucible::eval {
namespace fs = std::filesystem;
namespace {

struct Entry {
  fs::path path;
  fs::file_time_type used;
  std::uintmax_t bytes = 0;
  bool object = false;
};

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Only what the compiler writes: <2 hex>/<hash>.so and <2 hex>/<hash>.fail (and their half-written .tmp files).
std::vector<Entry> entries(const fs::path& dir, bool with_partial) {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& sub : fs::directory_iterator(dir, ec)) {
    if (!sub.is_directory(ec) || sub.path().filename().string().size() != 2) continue;
    for (const auto& f : fs::directory_iterator(sub.path(), ec)) {
      const std::string name = f.path().filename().string();
      const bool object = has_suffix(name, ".so"), failure = has_suffix(name, ".fail");
      const bool partial = name.find(".tmp") != std::string::npos || name.find(".build") != std::string::npos;
      if (!object && !failure && !(with_partial && partial)) continue;
      Entry e{f.path(), f.last_write_time(ec), 0, object};
      e.bytes = f.is_regular_file(ec) ? f.file_size(ec) : 0;
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace

std::uintmax_t default_cache_max_bytes() {
  if (const char* env = std::getenv("CRUCIBLE_CACHE_MAX_MB")) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    if (end && *end == '\0' && mb > 0) return static_cast<std::uintmax_t>(mb) << 20;
  }
  return std::uintmax_t{2} << 30;
}

CacheStats cache_stats(const fs::path& dir) {
  CacheStats stats;
  for (const auto& e : entries(dir, false)) {
    (e.object ? stats.objects : stats.failures) += 1;
    stats.bytes += e.bytes;
  }
  return stats;
}

int prune_cache(const fs::path& dir, std::uintmax_t max_bytes) {
  std::vector<Entry> all = entries(dir, false);
  std::uintmax_t total = 0;
  for (const auto& e : all) total += e.bytes;
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  int removed = 0;
  for (const auto& e : all) {
    if (total <= max_bytes) break;
    std::error_code ec;
    // An object a worker has open stays readable to it after the name goes.
    if (fs::remove(e.path, ec)) {
      total -= e.bytes;
      ++removed;
    }
  }
  return removed;
}

int clear_cache(const fs::path& dir) {
  int removed = 0;
  for (const auto& e : entries(dir, true)) {
    std::error_code ec;
    removed += fs::remove_all(e.path, ec) > 0 ? 1 : 0;
  }
  return removed;
}

void touch_cache_entry(const fs::path& entry) {
  std::error_code ignored;
  fs::last_write_time(entry, fs::file_time_type::clock::now(), ignored);
}

}  // namespace crucible::eval

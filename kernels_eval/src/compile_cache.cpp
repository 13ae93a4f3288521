#include "crucible/eval/compile_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace crucible::eval {
namespace fs = std::filesystem;
namespace {

enum class Kind { object, failure, triton };

struct Entry {
  fs::path path;
  fs::file_time_type used;
  std::uintmax_t bytes = 0;
  Kind kind = Kind::object;
};

// A Triton build directory used this recently may be in use: a compile step filling it, or a worker loading its
// kernels from it (which, unlike an open shared object, needs the files still there). Pruning leaves it.
constexpr auto kTritonInUse = std::chrono::minutes(10);

bool is_hash(const std::string& name) {
  return name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::uintmax_t tree_bytes(const fs::path& dir) {
  std::uintmax_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) bytes += it->file_size(ec);
  return bytes;
}

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Only what the compilers write: <2 hex>/<hash>.so and <2 hex>/<hash>.fail (and their half-written .tmp files), and
// Triton's build directories, triton/<hash>/ (the worker's own warm-up cache beside them is not an entry).
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
      Entry e{f.path(), f.last_write_time(ec), 0, object ? Kind::object : Kind::failure};
      e.bytes = f.is_regular_file(ec) ? f.file_size(ec) : 0;
      out.push_back(e);
    }
  }
  for (const auto& build : fs::directory_iterator(dir / "triton", ec)) {
    if (!build.is_directory(ec) || !is_hash(build.path().filename().string())) continue;
    out.push_back({build.path(), build.last_write_time(ec), tree_bytes(build.path()), Kind::triton});
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
    (e.kind == Kind::object ? stats.objects : e.kind == Kind::failure ? stats.failures : stats.triton_builds) += 1;
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
  const auto in_use_since = fs::file_time_type::clock::now() - kTritonInUse;
  for (const auto& e : all) {
    if (total <= max_bytes) break;
    if (e.kind == Kind::triton && e.used > in_use_since) continue;
    std::error_code ec;
    // An object a worker has open stays readable to it after the name goes.
    if (e.kind == Kind::triton ? fs::remove_all(e.path, ec) > 0 : fs::remove(e.path, ec)) {
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

#pragma once
// The compile cache on disk: one shared object (or one recorded failure) per content hash, in two-level directories,
// and one directory per Triton candidate and GPU (triton/<hash>/: its source, gate verdict and Triton's own cache).
// Bounded in size: entries are used in least-recently-used order (a hit refreshes its entry's time), and pruning
// removes the oldest until the cache fits; a Triton build used in the last ten minutes is left (it may be in use).
#include <cstdint>
#include <filesystem>

namespace crucible::eval {

// Where a bound comes from when none is configured: CRUCIBLE_CACHE_MAX_MB, else 2 GiB.
std::uintmax_t default_cache_max_bytes();

struct CacheStats {
  int objects = 0;   // compiled shared objects
  int failures = 0;  // recorded compile failures
  int triton_builds = 0;  // Triton build directories
  std::uintmax_t bytes = 0;
};

CacheStats cache_stats(const std::filesystem::path& dir);
// Removes least recently used entries until the cache holds at most `max_bytes`; returns the entries removed.
int prune_cache(const std::filesystem::path& dir, std::uintmax_t max_bytes);
// Removes every entry (and leftovers of interrupted compiles); returns the entries removed.
int clear_cache(const std::filesystem::path& dir);
// Marks an entry as just used.
void touch_cache_entry(const std::filesystem::path& entry);

}  // namespace crucible::eval

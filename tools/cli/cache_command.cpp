// crucible cache: the compile cache's size and location, pruning to a bound, clearing.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "crucible/eval/compile_cache.h"
#include "crucible/eval/compiler.h"

namespace crucible::cli {
namespace {

struct CacheArgs {
  std::string dir;
  double max_mb = 0.0;  // 0: the default bound
};

std::filesystem::path cache_dir(const CacheArgs& a) { return a.dir.empty() ? eval::default_cache_dir() : std::filesystem::path(a.dir); }

void print_stats(const std::filesystem::path& dir) {
  const eval::CacheStats s = eval::cache_stats(dir);
  std::printf("cache %s: %d compiled objects, %d recorded failures, %d Triton builds, %.1f MiB (bound %.0f MiB)\n",
              dir.c_str(), s.objects, s.failures, s.triton_builds, static_cast<double>(s.bytes) / (1 << 20),
              static_cast<double>(eval::default_cache_max_bytes()) / (1 << 20));
}

}  // namespace

Run add_cache_command(CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  auto* cmd = app.add_subcommand("cache", "The compile cache: stats, prune (to its size bound), clear");
  cmd->require_subcommand(1);
  auto* stats = cmd->add_subcommand("stats", "Entries and size");
  auto* prune = cmd->add_subcommand("prune", "Remove the least recently used entries until the cache fits its bound");
  auto* clear = cmd->add_subcommand("clear", "Remove every entry");
  for (auto* sub : {stats, prune, clear})
    sub->add_option("--cache-dir", args->dir, "Compile cache directory (default: $CRUCIBLE_CACHE_DIR, "
                                              "$XDG_CACHE_HOME/crucible or ~/.cache/crucible)");
  prune->add_option("--max-mb", args->max_mb, "The bound, MiB (default: $CRUCIBLE_CACHE_MAX_MB or 2048)");
  return [cmd, args, stats, prune, clear] {
    if (!cmd->parsed()) return -1;
    const auto dir = cache_dir(*args);
    if (prune->parsed()) {
      const auto bound = args->max_mb > 0 ? static_cast<std::uintmax_t>(args->max_mb * (1 << 20))
                                          : eval::default_cache_max_bytes();
      std::printf("removed %d entries\n", eval::prune_cache(dir, bound));
    } else if (clear->parsed()) {
      std::printf("removed %d entries\n", eval::clear_cache(dir));
    }
    print_stats(dir);
    (void)stats;
    return 0;
  };
}

}  // namespace crucible::cli

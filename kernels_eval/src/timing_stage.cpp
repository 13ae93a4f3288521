// Stage 5: timing. Warm-up, then timed calls rotating among input sets, the largest input refreshed
// (a new pool window) before every call so no output cache can hit. Each sample lasts until a sync
// returns, so work hidden behind an early completion signal is counted. Timed calls are checked too:
// every one must write all of its poisoned outputs, and at least one per input set (all in full mode)
// is compared with the reference. The reference is timed the same way, once per task and settings.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "stages.h"

namespace crucible::eval {
namespace {
using Clock = std::chrono::steady_clock;

std::size_t largest_input(const std::vector<ArenaTensor>& inputs) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i].bytes > inputs[best].bytes) best = i;
  return best;
}

// Which timed calls are compared in full: one random call per set, then random ones up to `wanted`.
std::vector<bool> pick_verified(int timed, int sets, int wanted, uint64_t seed) {
  std::mt19937_64 pick(seed ^ 0x7f4a7c15u);
  std::vector<bool> verify(timed, false);
  for (int s = 0; s < sets && s < timed; ++s) {
    int calls_on_set = (timed - s + sets - 1) / sets;  // calls s, s + sets, ...
    verify[s + sets * static_cast<int>(pick() % calls_on_set)] = true;
  }
  std::vector<int> order(timed);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), pick);
  for (int k = 0; k < timed && std::count(verify.begin(), verify.end(), true) < wanted; ++k) verify[order[k]] = true;
  return verify;
}

struct Snapshot {
  int call;
  std::vector<torch::Tensor> inputs, outputs;
};

void flag(Verdict& v, const char* code, const std::string& detail) {
  if (v.status != Status::correct) return;
  v.status = Status::incorrect;
  v.reasons.push_back({code, detail});
}

// Compares the kept outputs of checked timed calls with the reference, then forgets them.
void verify_snapshots(StageContext& ctx, Verdict& v, std::vector<Snapshot>& snapshots) {
  for (const auto& snap : snapshots) {
    auto refs = ctx.run_reference(snap.inputs);
    for (std::size_t k = 0; k < refs.size(); ++k) {
      Comparison c = compare(snap.outputs[k], refs[k], ctx.tolerance(k));
      if (!c.passed)
        flag(v, "skipped_work", "timed call " + std::to_string(snap.call) + ": " + std::to_string(c.mismatched) +
                                    " of " + std::to_string(c.elements) + " elements wrong (correct only when checked?)");
    }
  }
  snapshots.clear();
}

}  // namespace

bool measure_timing(StageContext& ctx, Verdict& v, std::map<std::string, TimingStats>& reference_times,
                    const std::string& reference_key) {
  const ArenaRef arena = ctx.arena();
  const auto& layout = ctx.layout;
  const int sets = ctx.sets();
  const std::size_t largest = largest_input(layout.inputs[0]);
  std::vector<std::vector<torch::Tensor>> current(sets);  // what each arena set holds now
  for (int s = 0; s < sets; ++s) {
    current[s] = ctx.draw(1000 + static_cast<uint64_t>(s));
    for (std::size_t i = 0; i < current[s].size(); ++i) write_tensor(arena, layout.inputs[s][i], current[s][i]);
  }
  uint64_t stream = 2000;
  auto refresh_largest = [&](int s) { current[s][largest] = ctx.pool.fresh(largest, ctx.seed * 0x100000001b3ULL + stream++); };

  for (int w = 0; w < ctx.warmup; ++w)
    for (int s = 0; s < sets; ++s)
      if (!ctx.call(s, v)) return false;

  auto verify = pick_verified(ctx.timed, sets, ctx.verified, ctx.seed);
  std::vector<Snapshot> snapshots;
  std::vector<double> samples;
  for (int i = 0; i < ctx.timed; ++i) {
    const int s = i % sets, pattern = i % 2;
    // The largest input is about to be replaced: whatever an earlier call did to it is checked first.
    if (!same_bytes(arena, layout.inputs[s][largest], current[s][largest]))
      flag(v, "input_mutated", "an input was modified during timing");
    refresh_largest(s);
    write_tensor(arena, layout.inputs[s][largest], current[s][largest]);
    for (const auto& slot : layout.outputs[s]) poison(arena, slot, pattern);
    double seconds = 0.0;
    if (!ctx.call(s, v, &seconds, /*settle=*/true, /*flush=*/true)) return false;
    samples.push_back(seconds * 1e6);
    int64_t unwritten = 0;
    for (const auto& slot : layout.outputs[s]) unwritten += count_poisoned(arena, slot, pattern);
    if (unwritten > 0)
      flag(v, "skipped_work", "timed call " + std::to_string(i) + ": " + std::to_string(unwritten) +
                                  " output elements never written");
    if (verify[i]) {
      Snapshot snap{i, current[s], {}};
      for (const auto& slot : layout.outputs[s]) snap.outputs.push_back(view_tensor(arena, slot).clone());
      snapshots.push_back(std::move(snap));
      // On a GPU the next call starts after an L2 flush anyway, and outputs of several GB are better
      // checked at once than kept.
      if (ctx.gpu) verify_snapshots(ctx, v, snapshots);
    }
  }
  v.candidate_time = summarize_times(samples);
  if (ctx.gpu && !ctx.gpu->event_samples_us.empty())
    v.candidate_event_median_us = summarize_times(ctx.gpu->event_samples_us).median_us;
  verify_snapshots(ctx, v, snapshots);
  for (int s = 0; s < sets; ++s) {
    for (std::size_t i = 0; i < current[s].size(); ++i)
      if (!same_bytes(arena, layout.inputs[s][i], current[s][i]))
        flag(v, "input_mutated", "an input was modified during timing");
    for (const auto& slot : layout.outputs[s])
      if (!guard_intact(arena, slot)) flag(v, "out_of_bounds_write", "a write past the end of an output during timing");
  }

  auto cached = reference_times.find(reference_key);
  if (cached != reference_times.end()) {
    v.reference_time = cached->second;
  } else if (ctx.timed > 0) {
    // Timed once per task and cached, so it can afford more samples than a fast-mode candidate gets: a
    // short run of eager ops is dominated by first-touch effects and would skew every speedup after it.
    const int ref_trials = std::max(ctx.timed, 30);
    for (int w = 0; w < std::max(ctx.warmup, 3); ++w)
      for (int s = 0; s < sets; ++s) ctx.run_reference(current[s]);
    std::vector<double> ref_samples;
    for (int i = 0; i < ref_trials; ++i) {
      int s = i % sets;
      refresh_largest(s);  // a new tensor, just written, as for the candidate
      ref_samples.push_back(ctx.timed_reference(current[s]) * 1e6);
    }
    v.reference_time = reference_times[reference_key] = summarize_times(ref_samples);
  }
  return true;
}

}  // namespace crucible::eval

// Stage 5: timing. Warm-up, then timed calls rotating among input sets, the largest input refreshed
// (a new pool window) before every call so no output cache can hit. Each sample lasts until a sync
// returns, so work hidden behind an early completion signal is counted. Timed calls are checked too:
// every one must write all of its poisoned outputs, and at least one per input set (all in full mode)
// is compared with the reference. On the CPU samples are CPU time, the worker's measured from outside it with
// the gaps between calls included, and each is paired with a reference sample until the speedup is tight.
// On a GPU the reference is timed once per task and settings, and inputs of several GB are changed in place rather
// than rewritten (see choose_refresh).
#include <algorithm>
#include <chrono>
#include <numeric>
#include <cstdio>
#include <optional>
#include <random>

#include "paired_timing.h"
#include "timing_rules.h"
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

// On a GPU whose task's inputs are large against its reference's time, a whole new input and whole poison before
// every timed call would cost more than the call: one element in kSampledBlock of the largest input is changed
// instead (reflected about the distribution's centre in the arena, its fingerprint following; one 128-byte
// run per span of kSampledBlock runs), and as many of each output are poisoned and counted after the call. A
// candidate learns which only by reading everything, which is as much as an honest memory-bound kernel does; a cached
// or stale answer is wrong at the changed elements and fails every compared call.
constexpr int64_t kSampledBlock = 1024;
// Sampled when a whole refresh of one set (new input, poisoned outputs) costs more than this share of a reference call.
constexpr double kWholeRefreshShare = 0.1;
// How many more samples a GPU's set of samples, `taken_s` long, gets (see ExtendRule); 0 on the CPU.
int extra_samples(const StageContext& ctx, const std::vector<double>& samples, double taken_s) {
  if (!ctx.gpu) return 0;
  const double left = ctx.budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.started).count();
  return extra_samples(extend_rule(ctx.full), summarize_times(samples).cv, static_cast<int>(samples.size()), taken_s,
                       ctx.budget_s > 0, left);
}

struct Snapshot {
  int call;
  std::vector<torch::Tensor> inputs, outputs;
};

void flag(Verdict& v, ReasonCode code, const std::string& detail) {
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
        flag(v, ReasonCode::skipped_work, "timed call " + std::to_string(snap.call) + ": " + std::to_string(c.mismatched) +
                                    " of " + std::to_string(c.elements) + " elements wrong (correct only when checked?)");
    }
  }
  snapshots.clear();
}

// Compares the outputs a call left in the arena with the reference on the inputs it was given (sampled GPU mode:
// no copy of several GB is kept).
void verify_in_place(StageContext& ctx, Verdict& v, int call, const std::vector<torch::Tensor>& inputs,
                     const std::vector<ArenaTensor>& outputs) {
  auto refs = ctx.run_reference(inputs);
  for (std::size_t k = 0; k < refs.size(); ++k) {
    Comparison c = compare(view_tensor(ctx.arena(), outputs[k]), refs[k], ctx.tolerance(k));
    if (!c.passed)
      flag(v, ReasonCode::skipped_work, "timed call " + std::to_string(call) + ": " + std::to_string(c.mismatched) + " of " +
                                  std::to_string(c.elements) + " elements wrong (correct only when checked?)");
  }
}

// Before timed call with set s: the set's largest input made new (or, sampled, moved by a reflection whose change is
// checked after the calls) and its outputs poisoned with `pattern`.
void refresh_and_poison(StageContext& ctx, Verdict& v, int s, std::size_t largest, int pattern, uint64_t poison_seed,
                        uint64_t& stream, std::vector<torch::Tensor>& current, std::vector<WrittenInput>& written,
                        std::optional<double> sampled_center) {
  const ArenaRef arena = ctx.arena();
  const auto& layout = ctx.layout;
  if (sampled_center) {
    // A change that an earlier call made to the input stays a difference from the fingerprint, which the reflection
    // moves by exactly its own change: checked after the calls.
    reflect_sampled(arena, layout.inputs[s][largest], *sampled_center, ctx.seed * 0x100000001b3ULL + stream++,
                    kSampledBlock, ctx.input_key, written[largest]);
    for (const auto& slot : layout.outputs[s]) poison_sampled(arena, slot, pattern, poison_seed, kSampledBlock);
    return;
  }
  // The largest input is about to be replaced: whatever an earlier call did to it is checked first.
  if (!same_bytes(arena, layout.inputs[s][largest], current[largest]))
    flag(v, ReasonCode::input_mutated, "an input was modified during timing");
  current[largest] = ctx.pool.fresh(largest, ctx.seed * 0x100000001b3ULL + stream++);
  write_tensor(arena, layout.inputs[s][largest], current[largest]);
  for (const auto& slot : layout.outputs[s]) poison(arena, slot, pattern);
}

// The reference's time on the very memory the candidate just read: the arena's views of set s's inputs. A
// memory-bound kernel's time on this kind of machine depends on which pages its buffers landed on (by up to 50% on a
// VM), so a reference reading buffers of its own drew another level for each evaluation and the speedup with it; on
// the same pages that cancels out of the ratio.
double paired_reference_us(StageContext& ctx, Verdict& v, int s, const std::vector<torch::Tensor>& current) {
  const ArenaRef arena = ctx.arena();
  std::vector<torch::Tensor> inputs;
  for (const auto& slot : ctx.layout.inputs[s]) inputs.push_back(view_tensor(arena, slot));
  // The candidate's inputs and outputs were just written by this process (new values, poison), on this core: an
  // untimed run leaves the reference's in the same state, whatever the evaluator did since its last sample.
  ctx.run_reference(inputs);
  // The worker should sleep meanwhile; whatever it does instead is charged to its next sample.
  const double reference_us = ctx.timed_reference(inputs) * 1e6;
  // Shared with the worker, they are checked at once: an input changed under the reference (to values it is slow on)
  // and put back later must not pass.
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (!same_bytes(arena, ctx.layout.inputs[s][k], current[k]))
      flag(v, ReasonCode::input_mutated, "an input was modified while the reference was timed on it");
  return reference_us;
}

// The timed calls. On the CPU each candidate sample is the worker's CPU time from the end of the previous sample to
// the end of this call's sync, gaps included: whatever the worker does while the evaluator prepares the next call (a
// take-over of the doorbell computing ahead) is charged to the call it serves, and the harness's own cost (null
// calls) is taken off. Each is paired with a reference sample on the same kind of freshly written inputs, timed by
// the evaluator thread's CPU clock on the same core, and pairs are added until their median speedup is tight.
// With `sampled_center` (GPU), inputs and outputs are changed and checked at sampled elements (see kSampledBlock).
// Without `pairing`, `calls` calls are made and their samples appended to `samples`.
bool timed_calls(StageContext& ctx, Verdict& v, std::vector<std::vector<torch::Tensor>>& current,
                 std::vector<std::vector<WrittenInput>>& written, uint64_t& stream, const PairedTimingRule* pairing,
                 int calls, PairedSamples& pairs, std::vector<double>& samples, std::optional<double> sampled_center,
                 StepTrace& steps) {
  const ArenaRef arena = ctx.arena();
  const auto& layout = ctx.layout;
  const int sets = ctx.sets();
  const std::size_t largest = largest_input(layout.inputs[0]);
  const bool cpu_clock = !ctx.gpu;
  const bool sampled = sampled_center.has_value();
  auto verify = pick_verified(calls, sets, ctx.verified, ctx.seed);
  std::vector<Snapshot> snapshots;
  double worker_cpu = cpu_clock ? ctx.worker.cpu_seconds_when_idle() : 0.0;
  for (int i = 0; pairing ? assess_pairs(pairs, *pairing) == PairedVerdict::more : i < calls; ++i) {
    const int s = i % sets, pattern = i % 2;
    const uint64_t poison_seed = ctx.seed * 0x100000001b3ULL + stream++;
    refresh_and_poison(ctx, v, s, largest, pattern, poison_seed, stream, current[s], written[s], sampled_center);
    steps.mark("refresh_and_poison");
    double seconds = 0.0;
    if (!ctx.call(s, v, &seconds, /*settle=*/true, /*flush=*/true)) return false;
    steps.mark("call");
    const double seconds_wall = seconds;
    if (cpu_clock) {
      const double now = ctx.worker.cpu_seconds_when_idle();
      seconds = std::max(0.0, now - worker_cpu - ctx.harness_cpu_s);
      worker_cpu = now;
    }
    samples.push_back(seconds * 1e6);
    if (!pairing && trace_calls())
      std::fprintf(stderr, "timed call %d: %.1f us (events %.1f us)\n", i, seconds * 1e6,
                   ctx.gpu && !ctx.gpu->event_samples_us.empty() ? ctx.gpu->event_samples_us.back() : 0.0);
    int64_t unwritten = 0;
    for (const auto& slot : layout.outputs[s])
      unwritten += sampled ? count_poisoned_sampled(arena, slot, pattern, poison_seed, kSampledBlock)
                           : count_poisoned(arena, slot, pattern);
    if (unwritten > 0)
      flag(v, ReasonCode::skipped_work, "timed call " + std::to_string(i) + ": " + std::to_string(unwritten) +
                                  (sampled ? " of the sampled output elements never written"
                                           : " output elements never written"));
    steps.mark("count_poisoned");
    // Calls past the count are checked at random too, one in four when all are checked, so none can be known safe.
    const bool checked = i < calls ? verify[i] : ctx.verified > 0 && (ctx.seed + stream + i) % 4 == 0;
    if (checked && sampled) {
      // The reference reads the arena's input, which the sampled changes made; the worker is idle until the next call.
      std::vector<torch::Tensor> inputs = current[s];
      inputs[largest] = view_tensor(arena, layout.inputs[s][largest]);
      verify_in_place(ctx, v, i, inputs, layout.outputs[s]);
    } else if (checked) {
      Snapshot snap{i, current[s], {}};
      for (const auto& slot : layout.outputs[s]) snap.outputs.push_back(view_tensor(arena, slot).clone());
      snapshots.push_back(std::move(snap));
      // Checked at once, not kept: outputs of several GB are better not held.
      verify_snapshots(ctx, v, snapshots);
    }
    if (checked) steps.mark("verify");
    if (pairing) {
      const double reference_us = paired_reference_us(ctx, v, s, current[s]);
      pairs.add(seconds * 1e6, reference_us);
      steps.mark("paired_reference");
      if (trace_calls())
        std::fprintf(stderr, "timed pair %d: candidate %.1f us (wall %.1f us), reference %.1f us\n", i,
                     seconds * 1e6, seconds_wall * 1e6, reference_us);
    }
  }
  verify_snapshots(ctx, v, snapshots);
  steps.mark("verify");
  return true;
}

// How CPU pairs are taken: the mode's count at least, and in full mode a quarter second of the candidate's time at
// least (the median of 50 pairs of a 0.2 ms kernel still moves by 5% from one block of pairs to the next); then
// until the median speedup is known within 2% (full) or 10% (fast), or eight times the count.
PairedTimingRule cpu_pairing(const StageContext& ctx) {
  PairedTimingRule rule;
  rule.min_pairs = ctx.timed;
  rule.max_pairs = 8 * ctx.timed;
  rule.min_candidate_s = ctx.full ? 0.25 : 0.0;
  rule.tight = ctx.full ? 0.02 : 0.10;
  return rule;
}

// Warm-up's length: its mode's count of calls (every set in turn) and, on a GPU, a stretch of time as well (see
// WarmupRule); a fast-mode evaluation warms for less, as Triton's benchmark helper does (25 ms).
WarmupRule warmup_rule(const StageContext& ctx, int min_calls) {
  WarmupRule rule;
  rule.min_calls = min_calls;
  if (ctx.gpu) rule.min_s = ctx.full ? 0.1 : 0.025;
  return rule;
}

// The reference's warm-up: whole rounds over the sets, at least three, until the rule is met.
void warm_up_reference(StageContext& ctx, std::vector<std::vector<torch::Tensor>>& current) {
  const int sets = ctx.sets();
  const WarmupRule rule = warmup_rule(ctx, std::max(ctx.warmup, 3) * sets);
  const auto started = std::chrono::steady_clock::now();
  for (int calls = 0;;) {
    for (int s = 0; s < sets; ++s, ++calls) ctx.run_reference(current[s]);
    if (ctx.gpu) cuda::synchronize();  // the reference's launches return before its work is done
    if (warmed_up(rule, calls, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()))
      return;
  }
}

// The reference's time on this task and settings, measured once and kept: on fresh inputs as a candidate's timed
// calls get them. Timed once per task, so it can afford more samples than a fast-mode candidate gets: a short run of
// eager ops is dominated by first-touch effects and would skew every speedup after it.
const TimingStats& reference_timing(StageContext& ctx, std::vector<std::vector<torch::Tensor>>& current, uint64_t& stream,
                                    std::map<std::string, TimingStats>& reference_times, const std::string& key) {
  if (auto cached = reference_times.find(key); cached != reference_times.end()) return cached->second;
  const std::size_t largest = largest_input(ctx.layout.inputs[0]);
  const int sets = ctx.sets();
  const int ref_trials = std::max(ctx.timed, 30);
  warm_up_reference(ctx, current);
  std::vector<double> ref_samples;
  const auto take = [&](int count) {
    for (int i = 0; i < count; ++i) {
      auto inputs = current[ref_samples.size() % sets];  // a new tensor, just written, as for the candidate
      inputs[largest] = ctx.pool.fresh(largest, ctx.seed * 0x100000001b3ULL + stream++);
      ref_samples.push_back(ctx.timed_reference(inputs) * 1e6);
      if (trace_calls()) std::fprintf(stderr, "reference call %zu: %.1f us\n", ref_samples.size() - 1, ref_samples.back());
    }
  };
  const auto ref_start = std::chrono::steady_clock::now();
  take(ref_trials);
  const double first_cv = summarize_times(ref_samples).cv;
  const int extra =
      extra_samples(ctx, ref_samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - ref_start).count());
  take(extra);
  TimingStats stats = summarize_times(ref_samples);
  stats.retaken = extra > 0;
  if (extra > 0 && trace_calls())
    std::fprintf(stderr, "reference samples spread by %.2f%%, %d more taken: %.2f%% over all\n", first_cv * 100, extra,
                 stats.cv * 100);
  return reference_times[key] = stats;
}

// GPU: whether timed calls change their inputs at sampled elements (returning twice the centre to reflect about) or
// get a whole new input and whole poison each. Sampled where the input's distribution allows it and a whole refresh,
// timed on set 0 (which it refreshes) at the task's first evaluation, costs more than kWholeRefreshShare of a
// reference call: memory-bound work on inputs of hundreds of MB or more. The evaluator then keeps no copy of the
// largest input: its fingerprint in `written` follows the sampled changes, and `current` no longer says what it holds.
std::optional<double> choose_refresh(StageContext& ctx, std::vector<std::vector<torch::Tensor>>& current,
                                     std::vector<std::vector<WrittenInput>>& written, uint64_t& stream,
                                     TaskTimings& known, const std::string& key) {
  const auto& layout = ctx.layout;
  const std::size_t largest = largest_input(layout.inputs[0]);
  const auto center = ctx.pool.reflection_center2(largest);
  if (!center) return std::nullopt;
  auto decided = known.sampled.find(key);
  if (decided == known.sampled.end()) {
    const TimingStats& reference = reference_timing(ctx, current, stream, known.reference, key);
    const ArenaRef arena = ctx.arena();
    cuda::synchronize();
    cuda::EventTimer timer;
    timer.start();
    current[0][largest] = ctx.pool.fresh(largest, ctx.seed * 0x100000001b3ULL + stream++);
    written[0][largest] = write_input(arena, layout.inputs[0][largest], current[0][largest], ctx.input_key);
    for (const auto& slot : layout.outputs[0]) poison(arena, slot, 0);
    timer.stop();
    const double whole_us = timer.seconds() * 1e6;
    if (trace_calls())
      std::fprintf(stderr, "timing: a whole refresh takes %.1f us, a reference call %.1f us\n", whole_us,
                   reference.median_us);
    decided = known.sampled.emplace(key, whole_us > kWholeRefreshShare * reference.median_us).first;
  }
  if (!decided->second) return std::nullopt;
  return center;
}

// Warm-up: every set in turn; with sampled checks (calls of milliseconds on GB tensors) the count is one call, and
// the time the rule adds on a GPU.
bool warm_up(StageContext& ctx, Verdict& v, bool sampled) {
  const int sets = ctx.sets();
  const WarmupRule rule = warmup_rule(ctx, sampled ? 1 : ctx.warmup * sets);
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  for (int w = 0; !warmed_up(rule, w, elapsed()); ++w)
    if (!ctx.call(w % sets, v)) return false;
  return true;
}

// CPU: a speedup the paired samples could not pin down is still reported, with the reason.
void note_noisy_pairs(Verdict& v, const PairedSamples& pairs, const PairedTimingRule& pairing) {
  v.speedup_spread = pairs.spread();
  if (assess_pairs(pairs, pairing) != PairedVerdict::noisy) return;
  v.reasons.push_back({ReasonCode::timing_noisy,
                       "after " + std::to_string(pairs.size()) + " paired samples the median speedup is known only "
                       "within " + std::to_string(static_cast<int>(pairs.half_width() * 100 + 0.5)) +
                           "% (pairs spread by " + std::to_string(static_cast<int>(pairs.spread() * 100 + 0.5)) +
                           "%)"});
}

// After the timed calls: every input as written (the largest one by its fingerprint where checks are sampled), and
// every output's guard intact.
void check_after_timing(StageContext& ctx, Verdict& v, const std::vector<std::vector<torch::Tensor>>& current,
                        const std::vector<std::vector<WrittenInput>>& written, bool sampled) {
  const ArenaRef arena = ctx.arena();
  const auto& layout = ctx.layout;
  const std::size_t largest = largest_input(layout.inputs[0]);
  for (int s = 0; s < ctx.sets(); ++s) {
    for (std::size_t i = 0; i < current[s].size(); ++i)
      if (!(sampled && i == largest ? input_intact(arena, layout.inputs[s][i], written[s][i], ctx.input_key)
                                    : same_bytes(arena, layout.inputs[s][i], current[s][i])))
        flag(v, ReasonCode::input_mutated, "an input was modified during timing");
    for (const auto& slot : layout.outputs[s])
      if (!guard_intact(arena, slot))
        flag(v, ReasonCode::out_of_bounds_write, "a write past the end of an output during timing");
  }
}

}  // namespace

bool measure_timing(StageContext& ctx, Verdict& v, TaskTimings& known, const std::string& key) {
  const ArenaRef arena = ctx.arena();
  const auto& layout = ctx.layout;
  const int sets = ctx.sets();
  std::vector<std::vector<torch::Tensor>> current(sets);  // what each arena set holds now (see choose_refresh)
  std::vector<std::vector<WrittenInput>> written(sets);
  for (int s = 0; s < sets; ++s) {
    current[s] = ctx.draw(1000 + static_cast<uint64_t>(s));
    for (std::size_t i = 0; i < current[s].size(); ++i)
      written[s].push_back(write_input(arena, layout.inputs[s][i], current[s][i], ctx.input_key));
  }
  uint64_t stream = 2000;
  StepTrace steps("timing", ctx.gpu != nullptr);
  steps.mark("write_inputs");

  // A GPU times its reference once per task, before the candidate: how it compares with the cost of refreshing
  // inputs decides how timed calls are checked.
  std::optional<double> sampled_center;
  if (ctx.gpu && ctx.timed > 0) sampled_center = choose_refresh(ctx, current, written, stream, known, key);
  steps.mark("choose_refresh");

  if (!warm_up(ctx, v, sampled_center.has_value())) return false;
  steps.mark("warmup");

  // The CPU pairs every candidate sample with a reference sample; a GPU times its reference once per task.
  const bool paired = !ctx.gpu && ctx.timed > 0;
  if (paired)
    for (int w = 0; w < std::max(ctx.warmup, 3); ++w)
      for (int s = 0; s < sets; ++s) ctx.run_reference(current[s]);
  const PairedTimingRule pairing = cpu_pairing(ctx);
  PairedSamples pairs;
  std::vector<double> samples;
  const auto timed_start = std::chrono::steady_clock::now();
  if (!timed_calls(ctx, v, current, written, stream, paired ? &pairing : nullptr, ctx.timed, pairs, samples,
                   sampled_center, steps))
    return false;
  const int extra =
      extra_samples(ctx, samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_start).count());
  if (extra > 0) {
    // More calls with all of the timing's checks, summarised with the first (their events too).
    const double first_cv = summarize_times(samples).cv;
    if (!timed_calls(ctx, v, current, written, stream, nullptr, extra, pairs, samples, sampled_center, steps))
      return false;
    if (trace_calls())
      std::fprintf(stderr, "timed calls spread by %.2f%%, %d more taken: %.2f%% over all\n", first_cv * 100, extra,
                   summarize_times(samples).cv * 100);
  }
  if (paired) note_noisy_pairs(v, pairs, pairing);
  v.candidate_time = summarize_times(samples);
  v.candidate_time->retaken = extra > 0;
  if (ctx.gpu && !ctx.gpu->event_samples_us.empty())
    v.candidate_event_median_us = summarize_times(ctx.gpu->event_samples_us).median_us;
  check_after_timing(ctx, v, current, written, sampled_center.has_value());
  steps.mark("final_checks");

  if (paired) {
    v.reference_time = summarize_times(pairs.reference_us());
    if (v.status == Status::correct && pairs.size() > 0) v.speedup = pairs.median_ratio();
    return true;
  }
  if (ctx.timed > 0) v.reference_time = reference_timing(ctx, current, stream, known.reference, key);
  return true;
}

}  // namespace crucible::eval

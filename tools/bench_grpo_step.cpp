// bench_grpo_step: one GRPO step and a TTT loop of the libtorch policy on one GPU, stage by stage.
//
//   bench_grpo_step --model DIR [--device cuda:0] [--groups 8] [--group-size 8] [--max-new 1024] [--ttt-steps 15]
//
// Stages of a GRPO step (batch of `groups` tasks x `group-size` samples):
//   sampling     LmPolicy::sample_groups: every group in one batched decode
//   evaluation   the step's candidates compiled (in parallel) and evaluated on the same GPU. Random weights write no
//                code, so the kernels evaluated are the search policy's CUDA samples for the same tasks: the
//                evaluator's work per candidate is real, only the author differs
//   log-probs    teacher-forced recomputation of every completion (what a trainer recomputes when it does not trust
//                the sampler's numbers), with the largest difference from the sampler's log-probs. Crucible's own step
//                does not run it (the update takes the sampler's log-probs, and its loss drops sequences whose
//                numbers disagree): the table gives the step with and without it
//   optimizer    LmPolicy::update: GRPO loss, backward through the model into the adapter, AdamW, checkpoint
// Then the evaluation of step t is run again beside the sampling of step t+1, to measure what overlap saves and
// what it does to the timings. The TTT loop adapts one task's adapter for --ttt-steps steps of
// --ttt-rollouts samples each.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <optional>

#include "crucible/eval/evaluator.h"
#include "lm/kernels/device_memory.h"
#include "lm/policy/lm_policy.h"
#include "policy/search_policy.h"
#include "tasks/task_loader.h"
#include "guarded_main.h"

using namespace crucible;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct EvalResult {
  double seconds = 0;
  int correct = 0;
  std::vector<double> median_us;  // per candidate, 0 when it has no timing
};

// Compiles every source on `jobs` threads, then evaluates them one by one on the device.
EvalResult evaluate_all(eval::Evaluator& evaluator, const std::vector<const eval::TaskSpec*>& tasks,
                        const std::vector<std::string>& sources, const eval::EvalOptions& options, int jobs) {
  const auto start = Clock::now();
  std::vector<std::thread> compilers;
  for (int t = 0; t < jobs; ++t)
    compilers.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < sources.size(); i += static_cast<std::size_t>(jobs))
        evaluator.compile(sources[i], options);
    });
  for (auto& t : compilers) t.join();
  EvalResult r;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    auto v = evaluator.evaluate(*tasks[i], sources[i], options);
    r.correct += v.status == eval::Status::correct;
    r.median_us.push_back(v.candidate_time ? v.candidate_time->median_us : 0.0);
  }
  r.seconds = since(start);
  return r;
}

std::vector<double> group_advantages(std::mt19937_64& rng, std::size_t n) {
  std::normal_distribution<double> normal;
  std::vector<double> a(n);
  for (auto& x : a) x = normal(rng);
  return a;
}

int64_t tokens_of(const std::vector<std::vector<policy::Sample>>& groups) {
  int64_t n = 0;
  for (const auto& g : groups)
    for (const auto& s : g) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

// What both parts share: the stand-in evaluator, the search policy writing stand-in kernels, the advantages.
struct Bench {
  std::string device;
  int jobs = 8;
  bool policy_only = false;  // skip the evaluation stages
  bool warm_up = true;       // an untimed step first
  eval::Evaluator* evaluator = nullptr;
  eval::EvalOptions options;
  policy::SearchPolicy* search = nullptr;
  std::mt19937_64 rng{7};
};

// Memory outside LibTorch's allocator (contexts, local memory, other processes) shows as the driver's use beyond it.
void where_memory_is(c10::Device dev) {
  const auto m = lm::device_memory(dev);
  constexpr double gib = 1 << 30;
  std::fprintf(stderr, "  memory: device in use %.2f GiB, allocator reserved %.2f, allocated %.2f; stack %lld B/thread\n",
               m.device_used / gib, m.reserved / gib, m.allocated / gib, static_cast<long long>(m.stack_per_thread));
}

void grpo_step(Bench& b, policy::LmPolicy& policy, const std::vector<eval::TaskSpec>& tasks, int group_size) {
  std::vector<policy::GroupAsk> asks;
  for (const auto& t : tasks) asks.push_back({&t, group_size});
  std::vector<const eval::TaskSpec*> eval_tasks;
  std::vector<std::string> sources;
  for (const auto& t : tasks)
    for (auto& s : b.search->sample(t, group_size)) eval_tasks.push_back(&t), sources.push_back(s.source);

  const c10::Device dev(b.device);
  auto peak_gib = [&] {  // since the last call
    const double gib = static_cast<double>(lm::peak_memory_bytes(dev)) / (1 << 30);
    lm::reset_peak_memory(dev);
    return gib;
  };
  // Each stage on stderr as it ends, so a run that fails (out of memory) shows how far it got: its seconds and peak.
  auto progress = [&](const char* stage, Clock::time_point start) {
    const std::pair<double, double> spent{since(start), peak_gib()};
    std::fprintf(stderr, "%s: %.2f s, peak %.2f GiB\n", stage, spent.first, spent.second);
    where_memory_is(dev);
    return spent;
  };
  // Warm-up, untimed: this batch shape's CUDA graph, cuBLAS's choices for the backward pass, the allocator. A run
  // pays this once, in its first step (without it, the step below includes them).
  if (b.warm_up) {
    auto start = Clock::now();
    std::vector<policy::Sample> warm;
    for (auto& g : policy.sample_groups(asks))
      for (auto& s : g) warm.push_back(std::move(s));
    progress("warm-up sampling", start);
    start = Clock::now();
    policy.completion_logprobs(warm);
    progress("warm-up log-probs", start);
    start = Clock::now();
    policy.update(warm, std::vector<double>(warm.size(), 0.0));
    progress("warm-up update", start);
  }
  peak_gib();
  auto t0 = Clock::now();
  auto groups = policy.sample_groups(asks);
  const auto [sample_s, sample_gib] = progress("sampling", t0);
  const int64_t new_tokens = tokens_of(groups);
  std::vector<policy::Sample> samples;
  for (auto& g : groups)
    for (auto& s : g) samples.push_back(std::move(s));
  const auto serial = b.policy_only ? EvalResult{} : evaluate_all(*b.evaluator, eval_tasks, sources, b.options, b.jobs);
  t0 = Clock::now();
  const auto recomputed = policy.completion_logprobs(samples);
  const auto [logprob_s, logprob_gib] = progress("log-probs", t0);
  double max_diff = 0, sum_diff = 0;
  int64_t compared = 0;
  for (std::size_t i = 0; i < samples.size(); ++i)
    for (std::size_t k = 0; k < recomputed[i].size(); ++k) {
      const double d = std::abs(recomputed[i][k] - samples[i].logprobs[k]);
      max_diff = std::max(max_diff, d), sum_diff += d, ++compared;
    }
  t0 = Clock::now();
  policy.update(samples, group_advantages(b.rng, samples.size()));
  const double update_s = since(t0);
  const double update_gib = peak_gib();

  std::printf("\n| stage | seconds | peak GiB | notes |\n| --- | ---: | ---: | --- |\n");
  std::printf("| sampling | %.2f | %.2f | %lld new tokens, %.0f tok/s |\n", sample_s, sample_gib,
              static_cast<long long>(new_tokens), new_tokens / sample_s);
  std::printf("| evaluation (compile + check + time) | %.2f | - | %zu candidates, %d correct, %d compile jobs |\n",
              serial.seconds, sources.size(), serial.correct, b.jobs);
  std::printf("| log-prob recomputation | %.2f | %.2f | max abs diff to the sampler %.3g, mean %.3g |\n", logprob_s,
              logprob_gib, max_diff,
              compared ? sum_diff / static_cast<double>(compared) : 0.0);
  const auto m = policy.update_metrics();
  std::printf("| optimizer step (+ checkpoint) | %.2f | %.2f | loss %.4g, kl %s, grad norm %.3g, %lld tokens |\n",
              update_s, update_gib, m.empty() ? 0.0 : m[0].loss,
              m.empty() || !m[0].kl ? "not measured" : std::to_string(*m[0].kl).c_str(),
              m.empty() ? 0.0 : m[0].grad_norm, static_cast<long long>(m.empty() ? 0 : m[0].tokens));
  std::printf("| step as Crucible runs it: sampling + optimizer | **%.2f** | %.2f | |\n", sample_s + update_s,
              std::max(sample_gib, update_gib));
  std::printf("| with the log-prob recomputation: sampling + log-probs + optimizer | %.2f | %.2f | |\n\n",
              sample_s + logprob_s + update_s, std::max({sample_gib, logprob_gib, update_gib}));

  if (b.policy_only) return;
  // Step t's evaluation beside step t+1's sampling. The candidates are compiled already (the cache), as they
  // would be in a pipeline whose compile pool runs ahead.
  EvalResult overlapped;
  double overlapped_sample_s = 0;
  t0 = Clock::now();
  std::thread evaluating([&] { overlapped = evaluate_all(*b.evaluator, eval_tasks, sources, b.options, b.jobs); });
  {
    const auto s0 = Clock::now();
    policy.sample_groups(asks);
    overlapped_sample_s = since(s0);
  }
  evaluating.join();
  const double overlapped_s = since(t0);
  const auto alone = evaluate_all(*b.evaluator, eval_tasks, sources, b.options, b.jobs);
  std::vector<double> ratios;
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (alone.median_us[i] > 0 && overlapped.median_us[i] > 0) ratios.push_back(overlapped.median_us[i] / alone.median_us[i]);
  std::sort(ratios.begin(), ratios.end());
  std::printf("| overlap of evaluation (step t) and sampling (step t+1) | seconds |\n| --- | ---: |\n");
  std::printf("| one after the other (compiled candidates) | %.2f |\n", alone.seconds + sample_s);
  std::printf("| side by side | %.2f (sampling %.2f, evaluation %.2f) |\n", overlapped_s, overlapped_sample_s,
              overlapped.seconds);
  if (!ratios.empty())
    std::printf("| candidate time beside sampling / alone | median %.2fx, worst %.2fx over %zu candidates |\n\n",
                ratios[ratios.size() / 2], ratios.back(), ratios.size());
}

void ttt_loop(Bench& b, policy::LmPolicySetup setup, const eval::TaskSpec& task, int steps, int rollouts) {
  setup.per_task_adapters = true;
  setup.state_dir = setup.state_dir.parent_path() / "ttt";
  policy::LmPolicy ttt(setup);
  const std::vector<const eval::TaskSpec*> ttt_tasks(static_cast<std::size_t>(rollouts), &task);
  ttt.sample(task, rollouts);  // warm-up: this batch shape's graph
  std::printf("| TTT step (%s, %d rollouts) | sampling s | evaluation s | optimizer s | wall s |\n", task.name.c_str(),
              rollouts);
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  double total = 0;
  for (int step = 0; step < steps; ++step) {
    const auto s0 = Clock::now();
    auto samples = ttt.sample(task, rollouts);
    const double sample_s = since(s0);
    std::vector<std::string> sources;  // fresh stand-ins each step (repeats hit the compile cache)
    for (const auto& s : b.search->sample(task, rollouts)) sources.push_back(s.source);
    const auto e0 = Clock::now();
    evaluate_all(*b.evaluator, ttt_tasks, sources, b.options, b.jobs);
    const double eval_s = since(e0);
    const auto u0 = Clock::now();
    ttt.update(samples, group_advantages(b.rng, samples.size()));
    const double update_s = since(u0);
    const double wall = since(s0);
    total += wall;
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f |\n", step, sample_s, eval_s, update_s, wall);
  }
  std::printf("\nTTT: %d steps in %.1f s, %.2f s per step\n", steps, total, total / steps);
}

}  // namespace

static int run_tool(int argc, char** argv) {
  CLI::App app{"One GRPO step and a TTT loop of the libtorch policy, stage by stage"};
  std::string model, device = "cuda:0", state = (fs::temp_directory_path() / "crucible-bench-grpo").string();
  std::vector<std::string> task_names{"relu", "gelu", "softmax", "rmsnorm", "matmul", "relu", "gelu", "softmax"};
  bool skip_grpo = false;
  int group_size = 8, max_new = 1024, micro_batch = 1, ttt_steps = 15, ttt_rollouts = 8, jobs = 8;
  app.add_option("--model", model, "Model directory")->required();
  app.add_option("--device", device, "cuda:N (also where candidates are evaluated)");
  app.add_option("--tasks", task_names, "One task per group (CUDA search-policy templates: relu gelu softmax rmsnorm matmul)");
  app.add_option("--group-size", group_size, "Samples per task");
  app.add_option("--max-new", max_new, "New tokens per completion");
  app.add_option("--micro-batch", micro_batch, "Sequences per forward/backward in the update");
  bool checkpointing = false;
  app.add_flag("--activation-checkpointing", checkpointing, "Recompute blocks in the backward pass (larger micro-batches fit)");
  bool measure_kl = false;
  app.add_flag("--measure-kl", measure_kl, "Measure the KL to the base model (a forward pass of it per micro-batch)");
  app.add_option("--ttt-steps", ttt_steps, "TTT steps on the first task (0: skip)");
  app.add_option("--ttt-rollouts", ttt_rollouts, "Samples per TTT step");
  app.add_option("--jobs", jobs, "Parallel compiles");
  app.add_option("--state", state, "Checkpoint directory");
  app.add_flag("--skip-grpo", skip_grpo, "Only the TTT loop");
  bool policy_only = false;
  app.add_flag("--policy-only", policy_only, "GRPO step: only the policy's stages (no evaluation, no overlap)");
  bool no_warm_up = false;
  app.add_flag("--no-warm-up", no_warm_up, "No untimed step first: the step measured includes one-time costs");
  std::optional<uint64_t> random_weights;
  app.add_option("--random-weights", random_weights,
                 "SEED: the model's weights drawn on the device at its config's shapes (config.json and tokenizer.json "
                 "are read; no weight files)");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run that dies (out of memory) keeps the lines it printed

  std::vector<eval::TaskSpec> tasks;
  for (const auto& n : task_names) tasks.push_back(tasks::find_task(n, tasks::default_tasks_dir()));
  fs::remove_all(state);
  policy::LmPolicySetup setup;
  setup.config.kind = experiment::PolicyKind::libtorch;
  setup.config.temperature = 1.0;
  setup.config.lm.model = model;
  setup.config.lm.device = eval::parse_device(device);
  setup.config.lm.max_new_tokens = max_new;
  setup.config.lm.micro_batch = micro_batch;
  setup.config.lm.activation_checkpointing = checkpointing;
  setup.config.lm.measure_kl = measure_kl;
  setup.language = eval::CandidateLanguage::cuda_cpp();
  setup.state_dir = fs::path(state) / "grpo";
  setup.random_weights = random_weights;

  // Stand-in kernels come from the search policy; the evaluator's GPU worker is warmed up once, untimed.
  policy::SearchPolicyOptions search_options;
  search_options.language = eval::CandidateLanguage::cuda_cpp();
  policy::SearchPolicy search(1, search_options);
  eval::EvaluatorConfig eval_config;
  eval_config.cache_dir = fs::path(state) / "cache";
  eval::Evaluator evaluator(eval_config);
  Bench b;
  b.device = device;
  b.jobs = jobs;
  b.policy_only = policy_only;
  b.warm_up = !no_warm_up;
  b.evaluator = &evaluator;
  b.options.device = setup.config.lm.device;
  b.search = &search;
  if (!b.policy_only) evaluator.evaluate(tasks.front(), search.sample(tasks.front(), 1).front().source, b.options);

  if (!skip_grpo) {
    where_memory_is(c10::Device(b.device));  // before the model: the evaluator's share
    const auto load_start = Clock::now();
    policy::LmPolicy policy(setup);
    std::printf("model %s on %s loaded in %.1f s; %zu groups x %d samples, %d new tokens each\n", model.c_str(),
                device.c_str(), since(load_start), tasks.size(), group_size, max_new);
    where_memory_is(c10::Device(b.device));
    grpo_step(b, policy, tasks, group_size);
  }
  if (ttt_steps > 0) ttt_loop(b, setup, tasks.front(), ttt_steps, ttt_rollouts);
  return 0;
}

int main(int argc, char** argv) {
  return crucible::tools::guarded_main("bench_grpo_step", [&] { return run_tool(argc, argv); });
}

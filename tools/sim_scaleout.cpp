// sim_scaleout: projects a sweep's candidates per second on 1-8 GPUs of a host and on 1-4 hosts from measured costs
// (runtime/cluster/scaleout_model.h), with a fresh worker per candidate and with workers reused, side by side.
// Usage: sim_scaleout [--evaluation-s 0.59] [--context-start-s 0.22] [--reuse 32] [--spares 3]
//                     [--coordinator-s 0.004] [--candidates 512]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cluster/scaleout_model.h"

int main(int argc, char** argv) {
  crucible::cluster::ScaleoutCosts costs;
  costs.evaluation_s = 0.59;      // full mode, relu at KernelBench's size, one H200 (docs/benchmarks.md)
  costs.context_start_s = 0.22;   // 4 processes starting at once: about 4.5 contexts/s for the host
  costs.coordinator_s = 0.004;
  int reuse = 32;
  int64_t candidates = 512;
  CLI::App app{"Projected sweep throughput from measured costs"};
  app.add_option("--evaluation-s", costs.evaluation_s, "One candidate's evaluation on one GPU, worker ready");
  app.add_option("--context-start-s", costs.context_start_s, "One worker start, serialised per host");
  app.add_option("--reuse", reuse, "Candidates a worker serves when reused")->check(CLI::Range(1, 1000));
  app.add_option("--spares", costs.spares_per_gpu, "Workers started ahead per GPU")->check(CLI::Range(1, 64));
  app.add_option("--coordinator-s", costs.coordinator_s, "Coordinator CPU per candidate");
  app.add_option("--candidates", candidates, "Candidates in the sweep")->check(CLI::Range(1, 10000000));
  CLI11_PARSE(app, argc, argv);

  std::printf("| hosts | GPUs a host | fresh worker: cand/s | vs 1 GPU | contexts | reuse %d: cand/s | vs 1 GPU | contexts |\n",
              reuse);
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto run = [&](int hosts, int gpus, int per_worker) {
    auto c = costs;
    c.candidates_per_worker = per_worker;
    return crucible::cluster::simulate_scaleout(c, {hosts, gpus, candidates});
  };
  const double one_fresh = run(1, 1, 1).candidates_per_s, one_reuse = run(1, 1, reuse).candidates_per_s;
  for (int hosts : {1, 2, 4})
    for (int gpus : {1, 2, 4, 8}) {
      const auto fresh = run(hosts, gpus, 1), reused = run(hosts, gpus, reuse);
      std::printf("| %d | %d | %.2f | %.2fx | %lld | %.2f | %.2fx | %lld |\n", hosts, gpus, fresh.candidates_per_s,
                  fresh.candidates_per_s / one_fresh, static_cast<long long>(fresh.contexts), reused.candidates_per_s,
                  reused.candidates_per_s / one_reuse, static_cast<long long>(reused.contexts));
    }
  return 0;
}

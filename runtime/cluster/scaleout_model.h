#pragma once
// What a sweep's throughput would be on G GPUs of each of H hosts, from measured costs: a queued simulation of
// workers started one after another per host (the driver creates a host's CUDA contexts one at a time), each serving
// up to `candidates_per_worker` candidates, a few started ahead per GPU, and a coordinator that spends a fixed CPU
// time per candidate. It projects what was not measured (8 GPUs, several hosts) from what was.
#include <cstdint>

namespace crucible::cluster {

struct ScaleoutCosts {
  double evaluation_s = 0.5;          // one candidate on one GPU, its worker ready
  double context_start_s = 1.0 / 7;   // one worker's start, serialised per host
  int candidates_per_worker = 1;      // 1: a fresh worker per candidate; more: reuse
  int spares_per_gpu = 3;             // workers started ahead per GPU
  double coordinator_s = 0.001;       // the coordinator's CPU per candidate, serialised for the whole run
};

struct ScaleoutShape {
  int hosts = 1;
  int gpus_per_host = 1;
  int64_t candidates = 512;
};

struct ScaleoutResult {
  double seconds = 0;           // the sweep's makespan
  double candidates_per_s = 0;
  int64_t contexts = 0;         // worker starts
};

ScaleoutResult simulate_scaleout(const ScaleoutCosts& costs, const ScaleoutShape& shape);

}  // namespace crucible::cluster

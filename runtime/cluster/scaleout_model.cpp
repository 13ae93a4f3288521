#include "cluster/scaleout_model.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace crucible::cluster {
namespace {

// A host's context starts: one at a time, in the order they are asked for.
class StartQueue {
 public:
  explicit StartQueue(double start_s) : start_s_(start_s) {}
  double start(double asked_at) {
    free_at_ = std::max(free_at_, asked_at) + start_s_;
    ++started_;
    return free_at_;
  }
  int64_t started() const { return started_; }

 private:
  double start_s_;
  double free_at_ = 0;
  int64_t started_ = 0;
};

struct Gpu {
  int host = 0;
  double free_at = 0;                 // when its current candidate ends
  std::vector<double> ready;          // when each of its started-ahead workers is ready, oldest first
  int left_in_worker = 0;             // candidates the worker in hand may still serve
};

void check(const ScaleoutCosts& c, const ScaleoutShape& s) {
  if (c.evaluation_s <= 0 || c.context_start_s < 0 || c.candidates_per_worker < 1 || c.spares_per_gpu < 1 ||
      c.coordinator_s < 0 || s.hosts < 1 || s.gpus_per_host < 1 || s.candidates < 1)
    throw std::invalid_argument("scale-out model: costs and counts must be positive");
}

}  // namespace

ScaleoutResult simulate_scaleout(const ScaleoutCosts& costs, const ScaleoutShape& shape) {
  check(costs, shape);
  std::vector<StartQueue> hosts(shape.hosts, StartQueue(costs.context_start_s));
  std::vector<Gpu> gpus;
  for (int h = 0; h < shape.hosts; ++h)
    for (int g = 0; g < shape.gpus_per_host; ++g) gpus.push_back({h, 0.0, {}, 0});
  for (int round = 0; round < costs.spares_per_gpu; ++round)  // the spares, asked for at the start
    for (auto& gpu : gpus) gpu.ready.push_back(hosts[gpu.host].start(0.0));
  double coordinator_free = 0, end = 0;
  for (int64_t i = 0; i < shape.candidates; ++i) {
    // The next candidate goes to the GPU that frees first; the coordinator hands it out.
    auto& gpu = *std::min_element(gpus.begin(), gpus.end(),
                                  [](const Gpu& a, const Gpu& b) { return a.free_at < b.free_at; });
    coordinator_free = std::max(coordinator_free, gpu.free_at) + costs.coordinator_s;
    double begin = coordinator_free;
    if (gpu.left_in_worker == 0) {  // a fresh worker: the oldest spare, and a start asked for to replace it
      begin = std::max(begin, gpu.ready.front());
      gpu.ready.erase(gpu.ready.begin());
      gpu.ready.push_back(hosts[gpu.host].start(begin));
      gpu.left_in_worker = costs.candidates_per_worker;
    }
    --gpu.left_in_worker;
    gpu.free_at = begin + costs.evaluation_s;
    end = std::max(end, gpu.free_at);
  }
  ScaleoutResult r;
  r.seconds = end;
  r.candidates_per_s = static_cast<double>(shape.candidates) / end;
  for (const auto& h : hosts) r.contexts += h.started();
  return r;
}

}  // namespace crucible::cluster

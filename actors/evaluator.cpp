#include "actors/evaluator.h"

#include <caf/blocking_actor.hpp>

#include <algorithm>

#include "logging/log.h"

namespace crucible::actors {
namespace {

// Not the candidate's fault, yet it must not stop the run: classified, kept, and visible in the record.
eval::Verdict evaluator_error(const msg::EvalRequest& request, eval::Device device, const std::string& what) {
  return eval::verdict_without_evaluation(request.candidate.task, device, eval::Status::runtime_error,
                                          eval::ReasonCode::evaluator_error, what);
}

// Where a candidate's time went before its evaluation, for the node's log: a node that builds slower than its device
// evaluates, or waits long for its device, shows it here.
struct Spent {
  double build_s = 0.0;
  double wait_s = 0.0;
};

// The verdict, and in `learned` the reference timings for the task that the request did not bring (for the
// coordinator to hand on).
eval::Verdict evaluate(eval::Evaluator& evaluator, const EvaluatorSetup& setup, const msg::EvalRequest& request,
                    std::vector<eval::SharedTiming>& learned, Spent& spent) {
  auto task = setup.tasks.find(request.candidate.task);
  try {
    if (task == setup.tasks.end()) throw std::invalid_argument("unknown task " + request.candidate.task);
    // Into the shared cache, where the evaluation finds it (a failure too, as a compile verdict).
    const double build_start = wall_now();
    if (setup.build_beside_evaluation) evaluator.compile(request.candidate.source, setup.options);
    const double wait_start = wall_now();
    spent.build_s = wait_start - build_start;
    auto lease = setup.leases->acquire(setup.options.device, devices::Party::evaluator);
    spent.wait_s = wall_now() - wait_start;
    evaluator.adopt_timings(request.reference_timings);
    auto verdict = evaluator.evaluate(task->second, request.candidate.source, setup.options);
    for (auto& t : evaluator.shared_timings(request.candidate.task)) {
      const auto& brought = request.reference_timings;
      if (std::none_of(brought.begin(), brought.end(), [&](const eval::SharedTiming& b) { return b.key == t.key; }))
        learned.push_back(std::move(t));
    }
    return verdict;
  } catch (const std::exception& e) {
    return evaluator_error(request, setup.options.device, e.what());
  }
}

}  // namespace

void evaluator(caf::blocking_actor* self, coordinator_actor coordinator, std::shared_ptr<EvaluatorSetup> setup) {
  log::Logger log{"evaluator." + setup->options.device.name()};
  const auto owned = setup->shared ? setup->shared : std::make_shared<eval::Evaluator>(setup->config);
  eval::Evaluator& evaluator = *owned;
  log.info("ready");
  const caf::duration timeout = setup->pull_timeout ? caf::duration{*setup->pull_timeout} : caf::duration{caf::infinite};
  bool running = true;
  while (running && !setup->stop->load()) {
    self->request(coordinator, timeout, pull_eval_atom_v, setup->options.device.name(), setup->session)
        .receive(
            [&](msg::EvalRequest& request) {
              const double start = wall_now();
              msg::VerdictReport report;
              std::vector<eval::SharedTiming> learned;
              Spent spent;
              try {
                report = msg::report(request.candidate.id, evaluate(evaluator, *setup, request, learned, spent));
                report.reference_timings = std::move(learned);
              } catch (const std::exception& e) {
                log.error("candidate ", request.candidate.id, ": ", e.what(), "; recorded as evaluator_error");
                report = msg::report(request.candidate.id, evaluator_error(request, setup->options.device, e.what()));
              }
              report.verdict.device = setup->options.device;
              report.started_at = start;
              report.finished_at = wall_now();
              const auto& v = report.verdict;
              log.info("candidate ", request.candidate.id, " (", request.candidate.task, "): ", eval::status_name(v.status),
                       v.reasons.empty() ? "" : " " + std::string(eval::reason_code_name(v.reasons.front().code)),
                       " in ", report.finished_at - start,
                       " s (built in ", spent.build_s, " s, waited ", spent.wait_s, " s for the device)");
              self->send(coordinator, std::move(report));
            },
            [&](caf::error& e) {
              if (e == caf::sec::request_timeout) return;  // pull again, or stop
              setup->end_code = msg::cluster_code(e);
              // The two ways a run ends normally, said as such; anything else as CAF renders it.
              setup->end_reason = setup->end_code == msg::cluster_error::run_over ? "the run is over"
                                  : e == caf::sec::request_receiver_down     ? "the coordinator has stopped"
                                                                              : self->system().render(e);
              running = false;
            });
  }
  if (running) setup->end_reason = "stopped";
  log.info("done: ", setup->end_reason);
}

}  // namespace crucible::actors

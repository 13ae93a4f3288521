#include "actors/rollout_generator.h"

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>

#include "crucible/eval/utf8_text.h"
#include "logging/log.h"

namespace crucible::actors {
namespace {

struct Pending {
  msg::GenerateRequest request;
  caf::typed_response_promise<msg::Generated> promise;
};

// Each sample becomes a candidate as it is, tagged with its place in the batch.
msg::Generated tag(const msg::GenerateRequest& request, std::vector<policy::Sample>& samples, double started) {
  msg::Generated out;
  out.unit = request.unit;
  out.started_at = started;
  for (uint32_t i = 0; i < samples.size(); ++i) {
    msg::Candidate c;
    static_cast<policy::Sample&>(c) = std::move(samples[i]);
    // The source stays byte for byte (it is compiled); the texts that go into records are made valid UTF-8.
    c.output = eval::valid_utf8(c.output);
    c.parse_error = eval::valid_utf8(c.parse_error);
    c.task = request.task;
    c.id = request.first_id + i;
    c.step = request.step;
    c.group = request.group;
    c.index = i;
    c.turn = request.turn;
    c.trajectory = request.turn == 0 ? c.id : request.previous.at(i).trajectory;
    if (!request.previous.empty()) c.parent = static_cast<int64_t>(request.previous.at(i).id);
    out.candidates.push_back(std::move(c));
  }
  out.finished_at = wall_now();
  return out;
}

// A refinement turn: one sample per previous candidate, each shown its verdict.
caf::result<msg::Generated> refine(GeneratorSetup& setup, log::Logger& log, const msg::GenerateRequest& request) {
  if (request.previous.size() != request.verdicts.size())
    return caf::make_error(caf::sec::invalid_argument, "generator: one verdict per previous candidate");
  std::vector<policy::Attempt> attempts;
  for (std::size_t i = 0; i < request.previous.size(); ++i) {
    const policy::Sample& previous = request.previous[i];
    attempts.push_back({previous, policy::feedback_of(request.verdicts[i])});
  }
  const double started = wall_now();
  std::vector<policy::Sample> samples;
  try {
    auto lease = setup.leases->acquire(setup.policy_device, devices::Party::policy);
    samples = setup.policy->refine(setup.tasks.at(request.task), attempts);
  } catch (const std::exception& e) {
    log.error(request.unit, ": refining ", request.task, " (turn ", request.turn, ") failed: ", e.what());
    return caf::make_error(caf::sec::runtime_error, std::string("refinement failed: ") + e.what());
  }
  if (samples.size() != attempts.size())
    return caf::make_error(caf::sec::runtime_error, "refinement failed: one sample per attempt expected");
  return tag(request, samples, started);
}

}  // namespace

// Requests wait a moment before sampling so that the groups the coordinator sends together (a GRPO step's batch)
// become one policy call: a language model decodes them as one batch instead of one batch per group.
generator_actor::behavior_type rollout_generator(generator_actor::pointer self, std::shared_ptr<GeneratorSetup> setup) {
  auto log = std::make_shared<log::Logger>("generator");
  auto pending = std::make_shared<std::vector<Pending>>();
  log->info("policy version ", setup->policy->version(), setup->policy_device ? " on " + setup->policy_device->name() : "");
  return {
      [=](msg::GenerateRequest& request) -> caf::result<msg::Generated> {
        if (setup->tasks.find(request.task) == setup->tasks.end())
          return caf::make_error(caf::sec::invalid_argument, "generator: unknown task " + request.task);
        if (!request.previous.empty()) return refine(*setup, *log, request);
        if (pending->empty()) self->delayed_send(self, std::chrono::milliseconds(2), flush_atom_v);
        auto promise = self->make_response_promise<msg::Generated>();
        pending->push_back({std::move(request), promise});
        return promise;
      },
      [=](flush_atom) {
        auto batch = std::move(*pending);
        pending->clear();
        if (batch.empty()) return;
        std::vector<policy::GroupAsk> asks;
        for (const auto& p : batch)
          asks.push_back({&setup->tasks.at(p.request.task), static_cast<int>(p.request.n)});
        const double started = wall_now();
        std::vector<std::vector<policy::Sample>> samples;
        try {
          auto lease = setup->leases->acquire(setup->policy_device, devices::Party::policy);
          samples = setup->policy->sample_groups(asks);
        } catch (const std::exception& e) {
          for (auto& p : batch) {
            log->error(p.request.unit, ": sampling ", p.request.task, " failed: ", e.what());
            p.promise.deliver(caf::make_error(caf::sec::runtime_error, std::string("sampling failed: ") + e.what()));
          }
          return;
        }
        for (std::size_t i = 0; i < batch.size(); ++i) {
          auto out = tag(batch[i].request, samples.at(i), started);
          log->debug(batch[i].request.unit, ": ", out.candidates.size(), " samples of ", batch[i].request.task,
                     " at version ", setup->policy->version(), " (", batch.size(), " groups in the batch)");
          batch[i].promise.deliver(std::move(out));
        }
      },
      [=](msg::PolicyPublished& published) {
        try {
          // A restore loads adapters onto the policy's device: no candidate is timed meanwhile.
          auto lease = setup->leases->acquire(setup->policy_device, devices::Party::policy);
          setup->policy->restore(published.snapshot);
          log->debug("now at policy version ", published.version);
        } catch (const std::exception& e) {
          log->error("could not restore policy version ", published.version, ": ", e.what());
        }
      },
  };
}

}  // namespace crucible::actors

#include "actors/rollout_generator.h"

#include "logging/log.h"

namespace crucible::actors {

generator_actor::behavior_type rollout_generator(generator_actor::pointer self, std::shared_ptr<GeneratorSetup> setup) {
  auto log = std::make_shared<log::Logger>("generator");
  log->info("policy version ", setup->policy->version(), setup->policy_device.empty() ? "" : " on " + setup->policy_device);
  return {
      [=](msg::GenerateRequest& request) -> caf::result<msg::Generated> {
        auto task = setup->tasks.find(request.task);
        if (task == setup->tasks.end())
          return caf::make_error(caf::sec::invalid_argument, "generator: unknown task " + request.task);
        msg::Generated out;
        out.unit = request.unit;
        out.started_at = wall_now();
        std::vector<policy::Sample> samples;
        try {
          auto lease = setup->leases->acquire(setup->policy_device);
          samples = setup->policy->sample(task->second, static_cast<int>(request.n));
        } catch (const std::exception& e) {
          log->error(request.unit, ": sampling ", request.task, " failed: ", e.what());
          return caf::make_error(caf::sec::runtime_error, std::string("sampling failed: ") + e.what());
        }
        for (uint32_t i = 0; i < samples.size(); ++i) {
          msg::Candidate c;
          c.id = request.first_id + i;
          c.step = request.step;
          c.task = request.task;
          c.group = request.group;
          c.index = i;
          c.policy_version = samples[i].policy_version;
          c.output = std::move(samples[i].output);
          c.source = std::move(samples[i].source);
          c.tokens = std::move(samples[i].tokens);
          c.logprobs = std::move(samples[i].logprobs);
          c.parse_error = std::move(samples[i].parse_error);
          out.candidates.push_back(std::move(c));
        }
        out.finished_at = wall_now();
        log->debug(request.unit, ": ", out.candidates.size(), " samples of ", request.task, " at version ",
                   setup->policy->version());
        return out;
      },
      [=](msg::PolicyPublished& published) {
        try {
          setup->policy->restore(published.snapshot);
          log->debug("now at policy version ", published.version);
        } catch (const std::exception& e) {
          log->error("could not restore policy version ", published.version, ": ", e.what());
        }
      },
  };
}

}  // namespace crucible::actors

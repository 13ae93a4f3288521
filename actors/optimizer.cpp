#include "actors/optimizer.h"

#include "logging/log.h"

namespace crucible::actors {

optimizer_actor::behavior_type optimizer(optimizer_actor::pointer, std::shared_ptr<OptimizerSetup> setup) {
  auto log = std::make_shared<log::Logger>("optimizer");
  return {
      [=](msg::TrainBatch& batch) -> caf::result<msg::PolicyPublished> {
        std::vector<policy::Sample> samples;
        std::vector<double> advantages;
        for (auto& s : batch.samples) {
          policy::Sample p;
          p.task = s.task;
          p.tokens = std::move(s.tokens);
          p.logprobs = std::move(s.logprobs);
          p.policy_version = s.policy_version;
          p.prompt = std::move(s.prompt);
          p.teacher_context = std::move(s.teacher_context);
          samples.push_back(std::move(p));
          advantages.push_back(s.advantage);
        }
        const double start = wall_now();
        try {
          auto lease = setup->leases->acquire(setup->policy_device);
          setup->policy->update(samples, advantages);
        } catch (const std::exception& e) {
          log->error(batch.unit, ": update failed: ", e.what());
          return caf::make_error(caf::sec::runtime_error, std::string("policy update failed: ") + e.what());
        }
        msg::PolicyPublished out{setup->policy->version(), batch.step, wall_now() - start, setup->policy->snapshot(), {}};
        for (const auto& m : setup->policy->update_metrics())
          out.metrics.push_back({m.adapter, m.loss, m.kl ? caf::optional<double>(*m.kl) : caf::none, m.entropy,
                                 m.clip_fraction, m.grad_norm, m.sequences, m.tokens,
                                 m.dropped_sequences, m.distill_kl, m.taught_sequences});
        log->info(batch.unit, ": ", samples.size(), " samples -> policy version ", out.version, " in ",
                  out.update_seconds, " s");
        return out;
      },
  };
}

}  // namespace crucible::actors

#include "actors/optimizer.h"

#include "logging/log.h"

namespace crucible::actors {

optimizer_actor::behavior_type optimizer(optimizer_actor::pointer, std::shared_ptr<OptimizerSetup> setup) {
  auto log = std::make_shared<log::Logger>("optimizer");
  return {
      [=](msg::TrainBatch& batch) -> caf::result<msg::PolicyPublished> {
        if (batch.samples.size() != batch.advantages.size())
          return caf::make_error(caf::sec::invalid_argument, "optimizer: one advantage per sample");
        const double start = wall_now();
        try {
          auto lease = setup->leases->acquire(setup->policy_device, devices::Party::policy);
          setup->policy->update(batch.samples, batch.advantages);
        } catch (const std::exception& e) {
          log->error(batch.unit, ": update failed: ", e.what());
          return caf::make_error(caf::sec::runtime_error, std::string("policy update failed: ") + e.what());
        }
        msg::PolicyPublished out{setup->policy->version(), batch.step, wall_now() - start, setup->policy->snapshot(),
                                 setup->policy->update_metrics()};
        log->info(batch.unit, ": ", batch.samples.size(), " samples -> policy version ", out.version, " in ",
                  out.update_seconds, " s");
        return out;
      },
  };
}

}  // namespace crucible::actors

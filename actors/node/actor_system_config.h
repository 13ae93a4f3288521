#pragma once
// The actor system settings every Crucible node uses: its message types, and a scheduler that sleeps when idle.
#include <caf/actor_system_config.hpp>

#include <chrono>
#include <cstddef>
#include <string>

#include "messages/cluster_error.h"
#include "messages/type_ids.h"

namespace crucible::node {

// The scheduled actors only route messages; the heavy ones run detached. CAF's default work stealing spins on
// every core while idle, which would steal the cores that CPU candidates are timed on.
inline void configure_actor_system(caf::actor_system_config& config, std::size_t scheduler_threads) {
  config.add_message_types<caf::id_block::crucible>();
  config.add_error_category(caf::atom("cluster"), [](uint8_t code, caf::atom_value, const caf::message& context) {
    std::string text = "cluster: " + messages::to_string(static_cast<messages::cluster_error>(code));
    if (context.match_elements<std::string>()) text += " (" + context.get_as<std::string>(0) + ")";
    return text;
  });
  config.set("scheduler.max-threads", scheduler_threads);
  config.set("work-stealing.aggressive-poll-attempts", 0);
  config.set("work-stealing.moderate-poll-attempts", 0);
  config.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
}

}  // namespace crucible::node

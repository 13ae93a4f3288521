#include "actors/node/transport.h"

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>

namespace crucible::node {

namespace {
caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}
}  // namespace

void enable_network(caf::actor_system_config& config, const cluster::NetworkSettings& settings) {
  config.load<caf::io::middleman>();
  config.set("middleman.heartbeat-interval", seconds(settings.heartbeat_s));
  config.set("middleman.connection-timeout", seconds(settings.connection_timeout_s));
  if (!settings.tls.enabled()) return;
  for (const auto& file : {settings.tls.certificate, settings.tls.key, settings.tls.ca})
    if (!std::filesystem::is_regular_file(file)) throw std::invalid_argument("TLS file " + file + " is not readable");
  config.openssl_certificate = settings.tls.certificate;
  config.openssl_key = settings.tls.key;
  config.openssl_cafile = settings.tls.ca;
  config.load<caf::openssl::manager>();
}

}  // namespace crucible::node

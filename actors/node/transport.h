#pragma once
// How nodes reach each other: CAF's middleman over TCP, or over TLS through libcaf_openssl. CAF's own heartbeats
// and connection timeout close a connection that has gone silent for good; the gateway's heartbeats (shorter) are
// what declares a node lost.
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/publish.hpp>
#include <caf/io/remote_actor.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>

#include <string>

#include "cluster/network_settings.h"

namespace crucible::node {

// Loads the middleman (and the OpenSSL manager with TLS) into a config before its actor system exists. Throws
// std::invalid_argument when a TLS file cannot be read.
void enable_network(caf::actor_system_config& config, const cluster::NetworkSettings& settings);

template <class Handle>
caf::expected<uint16_t> publish(const Handle& handle, const std::string& host, uint16_t port, bool tls) {
  const char* in = host.empty() ? nullptr : host.c_str();
  return tls ? caf::openssl::publish(handle, port, in, true) : caf::io::publish(handle, port, in, true);
}

template <class Handle>
caf::expected<Handle> connect(caf::actor_system& system, const std::string& host, uint16_t port, bool tls) {
  return tls ? caf::openssl::remote_actor<Handle>(system, host, port) : caf::io::remote_actor<Handle>(system, host, port);
}

}  // namespace crucible::node

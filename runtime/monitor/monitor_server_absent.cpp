// Without cpp-httplib the build has no monitor: asking for one is refused when the run starts.
#include <stdexcept>

#include "monitor/monitor_server.h"

namespace crucible::monitor {

struct MonitorServer::Impl {};

MonitorServer::MonitorServer(MonitorOptions, std::shared_ptr<const LiveStatus>) {
  throw std::invalid_argument("this build has no HTTP library (libcpp-httplib-dev): no monitor");
}
MonitorServer::~MonitorServer() = default;
int MonitorServer::port() const { return 0; }
std::string MonitorServer::url() const { return ""; }

}  // namespace crucible::monitor

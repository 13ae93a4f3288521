#include "monitor/monitor_server.h"

#include <httplib.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "http_guard/guarded_server.h"
#include "monitor/monitor_view.h"

namespace crucible::monitor {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Compares every byte, so the time taken does not tell how much of a guess was right.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

struct MonitorServer::Impl {
  explicit Impl(const http_guard::ServerLimits& limits) : server(limits) {}
  MonitorOptions options;
  std::shared_ptr<const LiveStatus> status;
  http_guard::GuardedServer server;
  std::thread thread;
  int port = 0;

  bool allowed(const httplib::Request& req, httplib::Response& res) const {
    if (options.token.empty()) {
      // Without a token only loopback names may ask: a web page that rebinds its own name to 127.0.0.1 must not
      // read the run's records through the user's browser.
      if (http_guard::is_loopback_host_header(req.get_header_value("Host"))) return true;
      res.status = 403;
      res.set_content("only loopback host names may ask without a token\n", "text/plain");
      return false;
    }
    std::string given = req.get_param_value("token");
    const auto auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
    if (same_secret(given, options.token)) return true;
    res.status = 401;
    res.set_content("a token is required (?token= or Authorization: Bearer)\n", "text/plain");
    return false;
  }
};

MonitorServer::MonitorServer(MonitorOptions options, std::shared_ptr<const LiveStatus> status)
    : impl_(std::make_unique<Impl>(options.limits)) {
  auto& im = *impl_;
  if (!is_loopback(options.host) && options.token.empty())
    throw std::invalid_argument("the monitor listens on " + options.host +
                                ", which is not loopback: set a token ([monitor] token_env)");
  im.options = std::move(options);
  im.status = std::move(status);
  auto guarded = [&im](auto handler) {
    return [&im, handler](const httplib::Request& req, httplib::Response& res) {
      if (!im.allowed(req, res)) return;
      res.set_header("Cache-Control", "no-store");
      handler(req, res);
    };
  };
  im.server.Get("/", guarded([](const httplib::Request&, httplib::Response& res) {
    res.set_content(monitor_page(), "text/html; charset=utf-8");
  }));
  im.server.Get("/status.json", guarded([&im](const httplib::Request&, httplib::Response& res) {
    res.set_content(status_json(im.status->snapshot(), im.options.run_dir, now_seconds()), "application/json");
  }));
  im.server.Get("/logs.json", guarded([&im](const httplib::Request& req, httplib::Response& res) {
    run::LogFilter filter;
    if (req.has_param("actor") && !req.get_param_value("actor").empty())
      filter.actors.push_back(req.get_param_value("actor"));
    if (req.has_param("node") && !req.get_param_value("node").empty()) filter.nodes.push_back(req.get_param_value("node"));
    if (req.has_param("level")) {
      const auto level = log::parse_level(req.get_param_value("level"));
      if (!level) {
        res.status = 400;
        res.set_content("unknown level (trace, debug, info, warn, error)\n", "text/plain");
        return;
      }
      filter.min_level = *level;
    }
    res.set_content(logs_json(im.options.run_dir, filter), "application/json");
  }));
  im.server.Get("/metrics", guarded([&im](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_metrics(im.status->snapshot(), now_seconds()), "text/plain; version=0.0.4");
  }));
  im.port = im.options.port ? (im.server.bind_to_port(im.options.host, im.options.port) ? im.options.port : -1)
                            : im.server.bind_to_any_port(im.options.host);
  if (im.port <= 0)
    throw std::runtime_error("the monitor cannot listen on " + im.options.host + ":" + std::to_string(im.options.port));
  im.thread = std::thread([&im] { im.server.listen_after_bind(); });
  // stop() before the loop runs would be missed and the destructor's join would wait for ever.
  for (int i = 0; i < 1000 && !im.server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!im.server.is_running()) {
    im.server.stop();
    im.thread.join();
    throw std::runtime_error("the monitor did not start listening on " + im.options.host);
  }
}

MonitorServer::~MonitorServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MonitorServer::port() const { return impl_->port; }

std::string MonitorServer::url() const {
  const auto& h = impl_->options.host;
  return "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(impl_->port) + "/";
}

}  // namespace crucible::monitor

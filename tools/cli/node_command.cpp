// crucible node --join HOST:PORT --devices cpu|cuda:0,cuda:1 --secret-file F [--name N]: an evaluator node that
// serves a running experiment's coordinator node (its `[cluster] listen`).
#include <unistd.h>

#include <cctype>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>

#include "cli/commands.h"
#include "cluster/compile_ahead.h"
#include "cluster/join_proof.h"
#include "experiment/experiment.h"
#include "logging/log.h"
#include "actors/node/evaluator_node.h"
#include "actors/node/log_outbox.h"

namespace crucible::cli {
namespace {

struct NodeArgs {
  std::string join;
  std::vector<std::string> devices{"cpu"};
  std::string secret_file, name, log_dir, tasks_dir;
  std::string tls_certificate, tls_key, tls_ca;
  double give_up_after_s = 120;
  bool exit_when_done = false;
  std::optional<int> compile_ahead;
};

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "node";
  std::string name(buf);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  return name.empty() ? "node" : name;
}

int node(const NodeArgs& a, CLI::App& app) {
  node::NodeRequest r;
  try {
    std::tie(r.host, r.port) = experiment::parse_host_port(a.join);
    if (a.secret_file.empty()) throw std::invalid_argument("a node proves the run's shared secret: give --secret-file");
    r.secret = cluster::read_secret_file(a.secret_file);
    const int tls = !a.tls_certificate.empty() + !a.tls_key.empty() + !a.tls_ca.empty();
    if (tls != 0 && tls != 3) throw std::invalid_argument("TLS needs --tls-certificate, --tls-key and --tls-ca together");
    for (const auto& d : a.devices) r.devices.push_back(eval::parse_device(d));
    if (r.devices.empty()) throw std::invalid_argument("give at least one device (--devices cpu, or cuda:0,...)");
    r.compile_ahead = a.compile_ahead;
    r.tasks_dir = a.tasks_dir;
    for (const auto& d : r.devices) cluster::pullers_for(d, r.compile_ahead);  // refused here, not once joined
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  r.name = a.name.empty() ? host_name() : a.name;
  r.tls = {a.tls_certificate, a.tls_key, a.tls_ca};
  r.give_up_after_s = a.give_up_after_s;
  r.exit_when_done = a.exit_when_done;
  r.outbox = std::make_shared<node::LogOutbox>();
  log::Options options;
  options.console_level = *log::parse_level(app["--log-level"]->as<std::string>());
  options.directory = a.log_dir;
  options.node = r.name;
  options.forward = [outbox = r.outbox](const std::string& component, const std::string& line) {
    outbox->add(component, line);
  };
  log::init(options);
  const auto result = node::run_evaluator_node(r);
  log::flush();
  (result.exit_code == 0 ? std::cout : std::cerr) << (result.exit_code == 0 ? "" : "node stopped: ") << result.message
                                                  << "\n";
  return result.exit_code;
}

}  // namespace

Run add_node_command(CLI::App& app) {
  auto args = std::make_shared<NodeArgs>();
  auto* cmd = app.add_subcommand("node", "Serve a running experiment as an evaluator node");
  cmd->add_option("--join", args->join, "The coordinator node's [cluster] listen address, HOST:PORT")->required();
  cmd->add_option("--devices", args->devices, "Devices to evaluate on: cpu, or cuda:0,cuda:1,...")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--secret-file", args->secret_file, "The run's shared secret (a file only its owner may read)");
  cmd->add_option("--name", args->name, "This node's name in the run's logs and metrics (default: the host name)");
  cmd->add_option("--give-up-after", args->give_up_after_s,
                  "Exit after this many seconds without a coordinator (at start, or after losing one)")
      ->capture_default_str();
  cmd->add_flag("--exit-when-done", args->exit_when_done, "Exit when the coordinator's last run is over");
  cmd->add_option("--compile-ahead", args->compile_ahead,
                  "Candidates each device builds while it evaluates another (default: 1 on a GPU; 0 on a CPU, where "
                  "a build would share the cores that time)");
  cmd->add_option("--log-dir", args->log_dir, "Also keep this node's per-actor logs here");
  cmd->add_option("--tasks-dir", args->tasks_dir,
                  "A copy of the run's tasks directory: imported tasks' TorchScript references are read from it")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--tls-certificate", args->tls_certificate, "TLS: this node's certificate (PEM)");
  cmd->add_option("--tls-key", args->tls_key, "TLS: its private key (PEM)");
  cmd->add_option("--tls-ca", args->tls_ca, "TLS: the CA that signed the coordinator's certificate (PEM)");
  return [cmd, args, &app]() { return cmd->parsed() ? node(*args, app) : -1; };
}

}  // namespace crucible::cli

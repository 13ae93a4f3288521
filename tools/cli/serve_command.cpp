// crucible serve: an OpenAI-compatible HTTP server over the native LibTorch model (GET /v1/models,
// POST /v1/chat/completions and /v1/completions, n > 1, logprobs, streaming as server-sent events), batching
// concurrent requests and choosing PEFT adapters per request by model name. One GPU-resident model shared by several
// runs or nodes, and the real server the client policy is tested against.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "experiment/experiment.h"
#include "serving/generation_service.h"
#include "serving/openai_api.h"

namespace crucible::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct ServeArgs {
  std::string model, name, listen = "127.0.0.1:8000", device = "cpu", dtype = "auto";
  std::vector<std::string> adapters;  // NAME=DIR
  std::size_t max_batch = 64;
  double batch_window_ms = 5;
  int threads = 128;
  bool no_graphs = false;
};

httplib::Server* g_server = nullptr;

// Debian's cpp-httplib listens with a backlog of 5 (compiled into its library): 64 clients connecting at once would
// wait for SYN retries of a second or more. Listening again on the same socket raises the backlog (Linux).
void raise_listen_backlog(int port) {
  for (int fd = 3; fd < 4096; ++fd) {
    int accepting = 0;
    socklen_t length = sizeof accepting;
    sockaddr_storage address{};
    socklen_t address_length = sizeof address;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0 || !accepting) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &address_length) != 0) continue;
    const int bound = address.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port)
                      : address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                                      : -1;
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}
void stop_on_signal(int) {
  if (g_server) g_server->stop();
}

int serve(const ServeArgs& a) {
  // 1. Settings, parsed at the edge.
  std::string host;
  uint16_t port = 0;
  try {
    const bool any_port = a.listen.size() > 2 && a.listen.compare(a.listen.size() - 2, 2, ":0") == 0;
    std::tie(host, port) = experiment::parse_host_port(any_port ? a.listen.substr(0, a.listen.size() - 1) + "1" : a.listen);
    if (any_port) port = 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: --listen: " << e.what() << "\n";
    return 2;
  }
  serving::ServiceOptions options;
  options.model_name = a.name.empty() ? fs::path(a.model).filename().string() : a.name;
  options.max_batch = a.max_batch;
  options.batch_window_s = a.batch_window_ms / 1000.0;
  for (const auto& spec : a.adapters) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::cerr << "error: --adapter wants NAME=DIR, not '" << spec << "'\n";
      return 2;
    }
    options.adapters[spec.substr(0, eq)] = spec.substr(eq + 1);
  }

  // 2. The model and its adapters, loaded once.
  lm::LanguageModelOptions mo;
  mo.device = a.device;
  mo.dtype = a.dtype;
  mo.cuda_graphs = !a.no_graphs;
  std::unique_ptr<serving::GenerationService> service;
  try {
    service = std::make_unique<serving::GenerationService>(lm::LanguageModel::load(a.model, mo), options);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }

  // 3. Routes: every answer is JSON, errors in OpenAI's shape.
  httplib::Server server;
  server.set_payload_max_length(serving::ApiLimits{}.max_body_bytes);  // refused before it is read, not after
  const int threads = a.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  std::atomic<uint64_t> next_id{1};
  auto answer_error = [](httplib::Response& res, const serving::ApiError& e) {
    res.status = e.status;
    res.set_content(serving::error_json(e), "application/json");
  };
  server.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& name : service->model_names())
      data.push_back({{"id", name}, {"object", "model"}, {"owned_by", "crucible"}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  auto completions = [&](serving::Endpoint endpoint) {
    return [&, endpoint](const httplib::Request& req, httplib::Response& res) {
      try {
        const auto request = serving::parse_request(endpoint, req.body);
        if (!service->serves(request.model))
          throw serving::ApiError(404, "not_found_error", "the model '" + request.model + "' is not served here");
        const uint64_t id = next_id++;
        const auto& model = service->model();
        const std::string prompt =
            endpoint == serving::Endpoint::chat ? model.chat_prompt(request.messages) : request.prompt;
        std::vector<lm::TextRequest> batch;
        // Concurrent requests without a seed each get their own: many n = 1 requests must not repeat one sample.
        const uint64_t seed = request.seed.value_or(id * 0x9e3779b97f4a7c15ULL);
        for (int i = 0; i < request.n; ++i) {
          lm::TextRequest r;
          r.prompt = prompt;
          r.temperature = request.temperature;
          r.top_p = request.top_p;
          r.top_k = request.top_k;
          r.seed = seed + static_cast<uint64_t>(i);
          r.max_new_tokens = request.max_tokens;
          r.stop_strings = request.stop;
          batch.push_back(std::move(r));
        }
        const auto done = service->generate(request.model, std::move(batch));
        const serving::ResponseIds ids{(endpoint == serving::Endpoint::chat ? "chatcmpl-" : "cmpl-") +
                                           std::to_string(id),
                                       static_cast<int64_t>(std::time(nullptr))};
        auto token_text = [&](int32_t id) { return model.tokenizer().decode({id}); };
        if (request.stream)
          res.set_content(serving::stream_events(request, done, ids, token_text), "text/event-stream");
        else
          res.set_content(serving::response_json(request, done, ids, token_text), "application/json");
      } catch (const serving::ApiError& e) {
        answer_error(res, e);
      } catch (const std::invalid_argument& e) {  // the model refused this request (a prompt over its context)
        answer_error(res, serving::ApiError(400, "invalid_request_error", e.what()));
      } catch (const std::exception& e) {
        answer_error(res, serving::ApiError(500, "server_error", e.what()));
      }
    };
  };
  server.Post("/v1/chat/completions", completions(serving::Endpoint::chat));
  server.Post("/v1/completions", completions(serving::Endpoint::completion));

  // 4. Listen (port 0: any free port, printed) until SIGINT or SIGTERM.
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    std::cerr << "error: cannot listen on " << a.listen << "\n";
    return 2;
  }
  raise_listen_backlog(bound);
  std::cout << "serving " << options.model_name << " (" << service->model_names().size() - 1
            << " adapters) on http://" << host << ":" << bound << "/v1" << std::endl;
  g_server = &server;
  std::signal(SIGINT, stop_on_signal);
  std::signal(SIGTERM, stop_on_signal);
  server.listen_after_bind();
  g_server = nullptr;
  const auto stats = service->stats();
  std::cout << "stopped after " << stats.requests << " requests, " << stats.sequences << " sequences in "
            << stats.batches << " batches (largest " << stats.largest_batch << ")" << std::endl;
  return 0;
}

}  // namespace

Run add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (batched, LoRA adapters per request)");
  cmd->add_option("--model", args->model, "Model directory: config.json, *.safetensors, tokenizer.json")->required();
  cmd->add_option("--name", args->name, "The model's name in requests (default: the directory's name)");
  cmd->add_option("--adapter", args->adapters, "NAME=DIR: a PEFT adapter served as model NAME (repeatable)");
  cmd->add_option("--listen", args->listen, "HOST:PORT (port 0: any free port)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, f32, bf16, f16")->capture_default_str();
  cmd->add_option("--max-batch", args->max_batch, "Sequences decoded together")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--batch-window-ms", args->batch_window_ms, "How long a request waits for others to share its decode")
      ->check(CLI::Range(0.0, 10000.0))->capture_default_str();
  cmd->add_option("--threads", args->threads, "Connections served at once")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_flag("--no-graphs", args->no_graphs, "Decode without CUDA graphs");
  return [cmd, args]() -> int {
    if (!cmd->parsed()) return -1;
    return serve(*args);
  };
}

}  // namespace crucible::cli

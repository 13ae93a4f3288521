// crucible serve: an OpenAI-compatible HTTP server over the native LibTorch model (GET /v1/models,
// POST /v1/chat/completions and /v1/completions, n > 1, logprobs, streaming as server-sent events), batching
// concurrent requests and choosing PEFT adapters per request by model name. One GPU-resident model shared by several
// runs or nodes, and the real server the client policy is tested against.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "experiment/experiment.h"
#include "serving/generation_service.h"
#include "serving/guarded_http_server.h"
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
  serving::ConnectionLimits limits;
  bool no_graphs = false;
  bool specials_in_content = false;
};

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
// SIGINT and SIGTERM are written to a pipe (all a signal handler may safely do); a thread reads it and stops.
int g_signal_pipe[2] = {-1, -1};
void on_stop_signal(int) {
  const char stop = 1;
  (void)!::write(g_signal_pipe[1], &stop, 1);
}

// Until a stop signal (or `release`): then the service cancels its work, so every waiting client is answered at
// once, and the server closes its connections.
std::thread stop_on_signal(serving::GenerationService& service, serving::GuardedHttpServer& server) {
  if (::pipe(g_signal_pipe) != 0) throw std::runtime_error("cannot make a pipe for signals");
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  return std::thread([&service, &server] {
    char what = 0;
    while (::read(g_signal_pipe[0], &what, 1) < 0 && errno == EINTR) {
    }
    if (what != 1) return;
    // A signal that came just before the server's loop started: stop() before it runs would be missed.
    for (int i = 0; i < 200 && !server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    service.stop();
    server.shut_down(std::chrono::milliseconds(500));
  });
}

void release_stop_thread(std::thread& thread) {
  const char release = 0;
  (void)!::write(g_signal_pipe[1], &release, 1);
  thread.join();
}

void answer_error(httplib::Response& res, const serving::ApiError& e) {
  res.status = e.status;
  res.set_content(serving::error_json(e), "application/json");
}

// The request's n sequences as the model takes them. A chat is encoded here: special tokens typed in its messages stay
// text (a message cannot open or close a turn) unless the server allows them.
std::vector<lm::TextRequest> text_requests(const serving::ApiRequest& request, const lm::LanguageModel& model,
                                           uint64_t id, bool specials_in_content) {
  lm::TextRequest r;
  if (request.endpoint == serving::Endpoint::chat)
    r.prompt_tokens = model.encode_chat(request.messages, {}, specials_in_content);
  else
    r.prompt = request.prompt;
  r.temperature = request.temperature;
  r.top_p = request.top_p;
  r.top_k = request.top_k;
  r.max_new_tokens = request.max_tokens;
  r.stop_strings = request.stop;
  // Concurrent requests without a seed each get their own: many n = 1 requests must not repeat one sample.
  const uint64_t seed = request.seed.value_or(id * 0x9e3779b97f4a7c15ULL);
  std::vector<lm::TextRequest> batch(static_cast<std::size_t>(request.n), r);
  for (int i = 0; i < request.n; ++i) batch[i].seed = seed + static_cast<uint64_t>(i);
  return batch;
}

// A harmony model's chat replies split into their final answer and their analysis, as vLLM serves gpt-oss; other
// formats' replies are sent whole.
std::vector<lm::ReplyParts> chat_parts(const serving::ApiRequest& request, const std::vector<lm::TextCompletion>& done,
                                       const lm::LanguageModel& model) {
  std::vector<lm::ReplyParts> parts;
  if (request.endpoint != serving::Endpoint::chat || model.chat_format() != lm::ChatFormat::harmony) return parts;
  for (const auto& c : done) parts.push_back(lm::reply_parts(lm::ChatFormat::harmony, c.tokens, c.text, model.tokenizer()));
  return parts;
}

// One completion request, answered while its client is connected: one that goes away cancels its sequences.
void answer_completion(serving::GenerationService& service, serving::Endpoint endpoint, const std::string& body,
                       uint64_t id, bool specials_in_content, httplib::Response& res) {
  try {
    const auto request = serving::parse_request(endpoint, body);
    if (!service.serves(request.model))
      throw serving::ApiError(404, "not_found_error", "the model '" + request.model + "' is not served here", "model");
    const auto& model = service.model();
    auto batch = text_requests(request, model, id, specials_in_content);
    const auto done = service.generate(request.model, std::move(batch), serving::GuardedHttpServer::client_gone);
    const serving::ResponseIds ids{(endpoint == serving::Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::to_string(id),
                                   static_cast<int64_t>(std::time(nullptr))};
    auto token_text = [&](int32_t token) { return model.tokenizer().decode({token}); };
    const auto parts = chat_parts(request, done, model);
    if (request.stream)
      res.set_content(serving::stream_events(request, done, ids, token_text, parts), "text/event-stream");
    else
      res.set_content(serving::response_json(request, done, ids, token_text, parts), "application/json");
  } catch (const serving::ApiError& e) {
    answer_error(res, e);
  } catch (const serving::GenerationCancelled& e) {  // the client went away (nobody reads this), or a shutdown
    answer_error(res, serving::ApiError(503, "server_error", e.what()));
  } catch (const std::invalid_argument& e) {  // the model refused this request (a prompt over its context)
    answer_error(res, serving::ApiError(400, "invalid_request_error", e.what()));
  } catch (const std::exception& e) {
    answer_error(res, serving::ApiError(500, "server_error", e.what()));
  }
}

std::string health_json(const serving::GenerationService& service, const serving::GuardedHttpServer& server) {
  const auto s = service.stats();
  return json{{"status", "ok"}, {"connections", server.open_connections()}, {"requests", s.requests},
              {"waiting", s.waiting}, {"decoding", s.decoding}, {"abandoned", s.abandoned},
              {"cancelled_sequences", s.cancelled_sequences}}.dump();
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
  serving::GuardedHttpServer server(a.limits);
  std::atomic<uint64_t> next_id{1};
  server.get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& name : service->model_names())
      data.push_back({{"id", name}, {"object", "model"}, {"owned_by", "crucible"}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  server.get("/health", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(health_json(*service, server), "application/json");
  });
  for (const auto endpoint : {serving::Endpoint::chat, serving::Endpoint::completion})
    server.post(endpoint == serving::Endpoint::chat ? "/v1/chat/completions" : "/v1/completions",
                [&, endpoint](const httplib::Request&, httplib::Response& res, const std::string& body) {
                  answer_completion(*service, endpoint, body, next_id++, a.specials_in_content, res);
                });

  // 4. Listen (port 0: any free port, printed) until SIGINT or SIGTERM.
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    std::cerr << "error: cannot listen on " << a.listen << "\n";
    return 2;
  }
  raise_listen_backlog(bound);
  auto stopper = stop_on_signal(*service, server);
  std::cout << "serving " << options.model_name << " (" << service->model_names().size() - 1
            << " adapters) on http://" << host << ":" << bound << "/v1" << std::endl;
  server.listen_after_bind();
  release_stop_thread(stopper);
  service->stop();
  server.shut_down(std::chrono::milliseconds(500));
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
  auto& limits = args->limits;
  cmd->add_option("--max-connections,--threads", limits.max_connections, "Connections open at once (more are answered 503)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--max-connections-per-client", limits.max_per_client, "Connections open at once from one address")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--head-timeout-s", limits.head_timeout_s, "Time for a request's line and headers to arrive")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  cmd->add_option("--body-timeout-s", limits.body_timeout_s, "Time for a request's body to arrive")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  cmd->add_flag("--allow-special-tokens-in-content", args->specials_in_content,
                "Parse special tokens (<|im_start|>, ...) typed in chat messages as control tokens, not text");
  cmd->add_flag("--no-graphs", args->no_graphs, "Decode without CUDA graphs");
  return [cmd, args]() -> int {
    if (!cmd->parsed()) return -1;
    return serve(*args);
  };
}

}  // namespace crucible::cli

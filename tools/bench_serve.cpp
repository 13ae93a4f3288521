// bench_serve: `crucible serve` against the in-process generator. The same 64 completions (one prompt, fixed seeds,
// a fixed number of new tokens) are decoded (1) in-process by LanguageModel::generate as one batch of 64 and (2) by
// a `crucible serve` process on loopback, asked by 64 concurrent HTTP clients, one completion each. Prints new
// tokens per second for both and their ratio (target: served >= 90% of in-process), and how the server batched.
// Usage: bench_serve --model DIR [--device cpu|cuda:0] [--clients 64] [--new-tokens 64] [--rounds 3]
//                    [--batch-window-ms 5]
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include "lm/model/language_model.h"

using Clock = std::chrono::steady_clock;
using nlohmann::json;

int main(int argc, char** argv) {
  CLI::App app{"crucible serve throughput against the in-process generator"};
  std::string model, device = "cpu", crucible = (std::filesystem::path(argv[0]).parent_path() / "crucible").string();
  int clients = 64, new_tokens = 64, rounds = 3;
  std::string window_ms = "5";
  app.add_option("--model", model, "Model directory")->required();
  app.add_option("--device", device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--clients", clients, "Concurrent requests (= the in-process batch)")->capture_default_str();
  app.add_option("--new-tokens", new_tokens, "Tokens per completion (no early stop)")->capture_default_str();
  app.add_option("--rounds", rounds, "Timed rounds of each; the best counts")->capture_default_str();
  app.add_option("--batch-window-ms", window_ms, "The server's batching window")->capture_default_str();
  app.add_option("--crucible", crucible, "The crucible binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const std::string prompt = "Write a fast CUDA kernel for ReLU over a float32 tensor of 4096 x 393216 elements.";

  // 1. In-process: one batch of `clients` requests, after one warm-up batch.
  crucible::lm::LanguageModelOptions mo;
  mo.device = device;
  double in_process = 0;
  {
    auto lm = crucible::lm::LanguageModel::load(model, mo);
    const std::string rendered = lm.chat_format() ? lm.user_prompt(prompt) : prompt;
    std::vector<crucible::lm::TextRequest> batch(static_cast<std::size_t>(clients));
    for (int i = 0; i < clients; ++i) {
      batch[i].prompt = rendered;
      batch[i].seed = static_cast<uint64_t>(i);
      batch[i].max_new_tokens = new_tokens;
      batch[i].stop_at_eos = false;
      batch[i].temperature = 1.0;
    }
    lm.generate(batch);
    for (int r = 0; r < rounds; ++r) {
      const auto start = Clock::now();
      const auto done = lm.generate(batch);
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::size_t tokens = 0;
      for (const auto& c : done) tokens += c.tokens.size();
      in_process = std::max(in_process, static_cast<double>(tokens) / s);
    }
  }

  // 2. Served: a crucible serve process; `clients` threads post at once, each one chat completion.
  const std::string log = "/tmp/bench_serve_" + std::to_string(getpid()) + ".log";
  const pid_t server = fork();
  if (server == 0) {
    freopen(log.c_str(), "w", stdout);
    execl(crucible.c_str(), crucible.c_str(), "serve", "--model", model.c_str(), "--device", device.c_str(),
          "--listen", "127.0.0.1:0", "--max-batch", std::to_string(clients).c_str(), "--batch-window-ms",
          window_ms.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const std::regex address(R"(:(\d+)/v1)");
  for (int wait = 0; wait < 600 && port == 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::smatch m;
    if (std::regex_search(text, m, address)) port = std::stoi(m[1]);
  }
  if (port == 0) {
    std::fprintf(stderr, "crucible serve did not start (see %s)\n", log.c_str());
    kill(server, SIGKILL);
    return 1;
  }
  auto round = [&] {
    std::vector<std::thread> threads;
    std::vector<std::size_t> tokens(static_cast<std::size_t>(clients), 0);
    const auto start = Clock::now();
    for (int i = 0; i < clients; ++i)
      threads.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(std::chrono::seconds(600));
        json body{{"model", std::filesystem::path(model).filename().string()},
                  {"messages", {{{"role", "user"}, {"content", prompt}}}},
                  {"max_tokens", new_tokens}, {"seed", i}, {"temperature", 1.0}};
        auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
        if (res && res->status == 200) tokens[i] = json::parse(res->body)["usage"]["completion_tokens"].get<std::size_t>();
      });
    for (auto& t : threads) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::size_t total = 0;
    for (auto t : tokens) total += t;
    return static_cast<double>(total) / s;
  };
  round();  // warm-up
  double served = 0;
  for (int r = 0; r < rounds; ++r) served = std::max(served, round());
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::printf("%-12s %8s %10s %12s\n", "path", "clients", "new_tokens", "tokens/s");
  std::printf("%-12s %8d %10d %12.1f\n", "in-process", clients, new_tokens, in_process);
  std::printf("%-12s %8d %10d %12.1f\n", "served", clients, new_tokens, served);
  std::printf("served / in-process: %.1f%% (target >= 90%%)\n", 100.0 * served / in_process);
  std::printf("server: %s", text.substr(text.rfind("stopped") == std::string::npos ? 0 : text.rfind("stopped")).c_str());
  std::remove(log.c_str());
  return 0;
}

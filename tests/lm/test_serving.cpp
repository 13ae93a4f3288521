// Served models: the OpenAI API's typed requests, then `crucible serve` on loopback (a real process with the tiny
// fixture model) and the client policy against it: samples with log-probs, adapters by name, streaming, batching of
// concurrent requests, a server killed mid-use turning into recorded policy errors and recovery when it returns, and
// a PUCT best-of-N run that samples from it.
#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "cli_support.h"
#include "lm/lm_support.h"
#include "openai_policy/openai_policy.h"
#include "policy/kernelbench_prompt.h"
#include "process_support.h"
#include "run/jsonl.h"
#include "serving/generation_service.h"
#include "serving/openai_api.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// `crucible serve` on the tiny model, with the fixture PEFT adapter as model "tuned"; waits for its address.
struct Server {
  explicit Server(const test::ScratchDir& scratch, int port = 0)
      : child({CRUCIBLE_CLI_PATH, "serve", "--model", test::lm_fixture("qwen2_tiny").string(), "--adapter",
               "tuned=" + test::lm_fixture("qwen2_tiny_peft").string(), "--listen",
               "127.0.0.1:" + std::to_string(port), "--max-batch", "16",
               "--batch-window-ms", "300"},  // generous: concurrent clients on a busy machine arrive spread out
              scratch.path() / ("serve-" + std::to_string(port) + ".log")) {
    const std::regex address(R"(on http://127\.0\.0\.1:(\d+)/v1)");
    std::smatch m;
    REQUIRE(test::eventually([&] {
      const std::string out = child.output();
      if (!std::regex_search(out, m, address)) return false;
      this->port = std::stoi(m[1]);
      return true;
    }, std::chrono::seconds(60)));
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port) + "/v1"; }
  test::Child child;
  int port = 0;
};

// Runs the experiment with `crucible run`; its first seed's candidate records.
std::vector<json> run_candidates(const test::ScratchDir& scratch, const std::string& toml) {
  const fs::path file = scratch.path() / "experiment.toml";
  test::write_file(file, toml);
  const fs::path dir = scratch.path() / "run";
  auto r = test::crucible_cli({"run", file.string(), "--out", dir.string()}, (scratch.path() / "cache").string(), 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return run::read_jsonl(dir / "seed-1" / "candidates.jsonl");
}

policy::OpenAiPolicySetup client(const std::string& base_url, int retries = 3) {
  policy::OpenAiPolicySetup s;
  s.config.kind = experiment::PolicyKind::openai;
  s.config.temperature = 1.0;
  s.config.openai.base_url = base_url;
  s.config.openai.model = "qwen2_tiny";
  s.config.openai.max_tokens = 8;
  s.config.openai.concurrency = 4;
  s.config.openai.timeout_s = 30;
  s.config.openai.retries = retries;
  s.config.openai.backoff_s = 0.05;
  return s;
}

}  // namespace

TEST_CASE("openai api: requests parse into typed values, malformed ones are 400s naming the field") {
  auto r = serving::parse_request(serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user",
      "content": "hi"}], "n": 3, "max_tokens": 7, "temperature": 0.5, "seed": 9, "logprobs": true, "stop": "##"})");
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 1);
  CHECK(r.messages[0].content == "hi");
  CHECK(r.n == 3);
  CHECK(r.max_tokens == 7);
  CHECK(*r.temperature == 0.5);
  CHECK(*r.seed == 9);
  CHECK(r.logprobs);
  CHECK(r.stop == std::vector<std::string>{"##"});
  // Content as an array of text parts, as newer clients send it.
  auto parts = serving::parse_request(serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user",
      "content": [{"type": "text", "text": "write "}, {"type": "text", "text": "a kernel"}]}]})");
  CHECK(parts.messages.at(0).content == "write a kernel");
  auto c = serving::parse_request(serving::Endpoint::completion, R"({"model": "m", "prompt": "x", "logprobs": 1})");
  CHECK(c.prompt == "x");
  CHECK(c.logprobs);
  struct Bad {
    serving::Endpoint endpoint;
    const char* body;
    const char* names;
  };
  const Bad bad[] = {
      {serving::Endpoint::chat, "not json", "not valid JSON"},
      {serving::Endpoint::chat, "[1, 2]", "not a JSON object"},
      {serving::Endpoint::chat, "{\"model\": \"m\xff\", \"messages\": []}", "not valid UTF-8"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.9})",
       "'max_tokens' must be an integer"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2.5})",
       "'n' must be an integer"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": 0.5})",
       "'seed' must be an integer"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "max_completion_tokens": null, "max_tokens": -3})", "'max_tokens'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "max_completion_tokens": 4, "max_tokens": "many"})", "'max_tokens'"},
      {serving::Endpoint::completion, R"({"model": "m", "prompt": "x", "max_completion_tokens": 5000})",
       "'max_completion_tokens'"},
      {serving::Endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}]})", "'model'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": []})", "'messages'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})", "role"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 65})", "'n'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "'temperature'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": 7}]})", "'content'"},
      {serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "text parts"},
      {serving::Endpoint::completion, R"({"model": "m"})", "'prompt'"},
      {serving::Endpoint::completion, R"({"model": "m", "prompt": "x", "stop": [1]})", "'stop'"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.body);
    try {
      serving::parse_request(b.endpoint, b.body);
      FAIL("accepted");
    } catch (const serving::ApiError& e) {
      CHECK(e.status == 400);
      CHECK(std::string(e.what()).find(b.names) != std::string::npos);
      // The error body is OpenAI's shape, naming the field where there is one.
      const auto body = json::parse(serving::error_json(e))["error"];
      CHECK(body["type"] == "invalid_request_error");
      CHECK(body["code"] == 400);
      CHECK(body.contains("param"));
      const std::string names = b.names;
      const std::string field = names.rfind("'", 0) == 0 ? names.substr(1, names.find('\'', 1) - 1) : "";
      if (!field.empty() && field != "content") CHECK(body["param"] == field);
    }
  }
  // Counts written as whole floats are integers; max_completion_tokens wins over max_tokens, a null one does not.
  const std::string x = R"({"model": "m", "prompt": "x", )";
  CHECK(serving::parse_request(serving::Endpoint::completion, x + R"("max_tokens": 7.0})").max_tokens == 7);
  CHECK(serving::parse_request(serving::Endpoint::completion, x + R"("max_tokens": 7, "max_completion_tokens": 9})").max_tokens == 9);
  CHECK(serving::parse_request(serving::Endpoint::completion, x + R"("max_tokens": 7, "max_completion_tokens": null})").max_tokens == 7);
  // Bare HTTP statuses get the same shape.
  for (int status : {404, 405, 413, 431, 503}) {
    const auto body = json::parse(serving::error_json(serving::http_status_error(status)))["error"];
    CHECK(body["code"] == status);
    CHECK(!body["message"].get<std::string>().empty());
    CHECK(body["param"].is_null());
  }
  // A client reads back an error body as the server's error.
  CHECK_THROWS_AS(serving::parse_response(serving::Endpoint::chat, serving::error_json({404, "not_found_error", "no"})),
                  serving::ApiError);
}

TEST_CASE("openai api: a chat reply split into answer and reasoning is content and reasoning_content, both ways") {
  const auto request = serving::parse_request(serving::Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  lm::TextCompletion answered, thinking_only;
  answered.text = "raw text of both channels";
  answered.finish_reason = "stop_token";
  thinking_only.text = "raw";
  thinking_only.finish_reason = "length";
  const std::vector<lm::ReplyParts> parts{{"```cpp\nk\n```", "plan the kernel"}, {std::nullopt, "still planning"}};
  auto token_text = [](int32_t) { return std::string("t"); };
  const auto body = serving::response_json(request, {answered, thinking_only}, {"chatcmpl-1", 0}, token_text, parts);
  const auto message = json::parse(body)["choices"][1]["message"];
  CHECK(message["content"].is_null());
  CHECK(message["reasoning_content"] == "still planning");
  const auto back = serving::parse_response(serving::Endpoint::chat, body);
  REQUIRE(back.size() == 2);
  CHECK(back[0].text == "```cpp\nk\n```");
  CHECK(back[0].reasoning == std::optional<std::string>("plan the kernel"));
  CHECK(back[1].text.empty());  // no answer: nothing a kernel could be taken from
  CHECK(back[1].finish_reason == "length");
  // Without parts the whole text is the content, and no reasoning is sent.
  const auto whole = serving::parse_response(serving::Endpoint::chat,
                                             serving::response_json(request, {answered}, {"c", 0}, token_text));
  CHECK(whole[0].text == answered.text);
  CHECK_FALSE(whole[0].reasoning);
  // Streamed: the reasoning in a chunk of its own before the content.
  const auto events = serving::stream_events(request, {answered}, {"c", 0}, token_text, parts);
  const auto reasoning_at = events.find("\"reasoning_content\":\"plan the kernel\"");
  const auto content_at = events.find("\"content\":\"```cpp");
  CHECK(reasoning_at != std::string::npos);
  CHECK(content_at != std::string::npos);
  CHECK(reasoning_at < content_at);
}

TEST_CASE("generation service: a request that arrives while a batch decodes joins it, and is answered first") {
  serving::ServiceOptions options;
  options.model_name = "tiny";
  options.max_batch = 4;
  options.batch_window_s = 0.0;
  auto reference = lm::LanguageModel::load(test::lm_fixture("qwen2_tiny"));
  auto request = [](int64_t tokens, uint64_t seed) {
    lm::TextRequest r;
    r.prompt = "def relu(x):";
    r.max_new_tokens = tokens;
    r.seed = seed;
    r.stop_at_eos = false;  // exactly `tokens` tokens: the long one decodes for all its steps
    return r;
  };
  // A batch of two rows: one ends after two tokens, the other decodes 2000, so a row stays idle for long. The late
  // request must arrive while that row decodes: on a machine starved for long enough the row ends first, which
  // proves nothing either way, and the scenario runs again on a fresh service.
  bool overlapped = false;
  for (int attempt = 0; attempt < 3 && !overlapped; ++attempt) {
    serving::GenerationService service(lm::LanguageModel::load(test::lm_fixture("qwen2_tiny")), options);
    auto first = std::async(std::launch::async, [&] { return service.generate("tiny", {request(2, 1), request(2000, 2)}); });
    REQUIRE(test::eventually([&] { return service.stats().batches == 1; }, std::chrono::seconds(60)));
    const auto late = service.generate("tiny", {request(6, 3)});  // blocks until its own completion is in
    // Whether the long row was still decoding is told by the service, not by `first`: its future can still be
    // pending, its thread not yet scheduled, when the batch it waits on has long ended.
    const auto stats = service.stats();
    if (stats.batches == 2 && stats.joined == 0) {
      MESSAGE("attempt ", attempt + 1, ": the long row ended before the late request arrived; again");
      first.get();
      continue;
    }
    overlapped = true;
    CHECK(stats.batches == 1);
    CHECK(stats.joined == 1);
    REQUIRE(late.size() == 1);
    CHECK(late[0].tokens.size() == 6);
    CHECK(late[0].tokens == reference.generate({request(6, 3)})[0].tokens);  // as if decoded alone
    const auto early = first.get();
    REQUIRE(early.size() == 2);
    CHECK(early[0].tokens == reference.generate({request(2, 1)})[0].tokens);
    CHECK(early[1].tokens.size() == 2000);
    // A bad request fails its own client only, also when it arrives mid-batch. The good one may start a second
    // batch or, arriving as the first batch's last row ends, join it: either way it is decoding.
    auto again = std::async(std::launch::async, [&] { return service.generate("tiny", {request(2, 4), request(800, 5)}); });
    REQUIRE(test::eventually([&] {
      const auto s = service.stats();
      return s.batches + s.joined == 3;
    }, std::chrono::seconds(60)));
    CHECK_THROWS_AS(service.generate("tiny", {request(4000, 6)}), std::invalid_argument);  // past 2048 positions
    CHECK(again.get().size() == 2);
  }
  CHECK(overlapped);
}

TEST_CASE("generation service: a batch takes no more requests once another model's request is the oldest waiting") {
  serving::ServiceOptions options;
  options.model_name = "tiny";
  options.adapters["tuned"] = test::lm_fixture("qwen2_tiny_peft");
  options.max_batch = 4;
  options.batch_window_s = 0.0;
  auto request = [](int64_t tokens) {
    lm::TextRequest r;
    r.prompt = "def relu(x):";
    r.max_new_tokens = tokens;
    r.stop_at_eos = false;
    return r;
  };
  // The adapter's request must arrive while the base batch decodes; where the machine was starved so long that the
  // batch ended first, the scenario runs again on a fresh service.
  bool overlapped = false;
  for (int attempt = 0; attempt < 3 && !overlapped; ++attempt) {
    serving::GenerationService service(lm::LanguageModel::load(test::lm_fixture("qwen2_tiny")), options);
    auto base = std::async(std::launch::async, [&] { return service.generate("tiny", {request(2), request(2000)}); });
    REQUIRE(test::eventually([&] { return service.stats().batches == 1; }, std::chrono::seconds(60)));
    // The adapter's request waits (another model: another batch); the base model's later one must not pass it.
    auto tuned = std::async(std::launch::async, [&] { return service.generate("tuned", {request(3)}); });
    REQUIRE(test::eventually([&] {
      return service.stats().waiting == 1 || base.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }, std::chrono::seconds(60)));
    if (service.stats().waiting != 1) {
      MESSAGE("attempt ", attempt + 1, ": the base batch ended before the adapter's request came; again");
      tuned.get();
      continue;
    }
    overlapped = true;
    const auto later = service.generate("tiny", {request(3)});
    // It did not join the base batch, though that batch had an idle row for all its 2000 steps.
    CHECK(service.stats().joined == 0);
    CHECK(service.stats().batches == 3);  // base, then tuned, then the later base request
    CHECK(tuned.get().size() == 1);
    CHECK(later.size() == 1);
    CHECK(base.get().size() == 2);
  }
  CHECK(overlapped);
}

TEST_CASE("crucible serve and the client policy: samples, adapters by name, streaming, batched concurrent requests") {
  test::ScratchDir scratch("serve");
  Server server(scratch);
  httplib::Client http("127.0.0.1", server.port);
  auto models = http.Get("/v1/models");
  REQUIRE(models);
  const auto names = json::parse(models->body)["data"];
  REQUIRE(names.size() == 2);
  CHECK(names[0]["id"] == "qwen2_tiny");
  CHECK(names[1]["id"] == "tuned");

  policy::OpenAiPolicy p(client(server.base_url()));
  const auto relu = tasks::find_task("relu", test::tasks_dir());
  const auto samples = p.sample(relu, 4);
  REQUIRE(samples.size() == 4);
  for (const auto& s : samples) {
    CHECK_FALSE(s.policy_error);
    CHECK(!s.output.empty());
    CHECK(!s.logprobs.empty());
    for (float lp : s.logprobs) CHECK(lp <= 0.0f);
    CHECK(!s.parse_error.empty());  // the random model writes no code block: a parse error, not a policy error
  }

  // The adapter is chosen by model name; an unknown name is a 404 in OpenAI's shape.
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1, "model": )";
  auto base = http.Post("/v1/chat/completions", chat + "\"qwen2_tiny\"}", "application/json");
  auto tuned = http.Post("/v1/chat/completions", chat + "\"tuned\"}", "application/json");
  auto missing = http.Post("/v1/chat/completions", chat + "\"gpt-9\"}", "application/json");
  REQUIRE((base && tuned && missing));
  CHECK(base->status == 200);
  CHECK(tuned->status == 200);
  CHECK(missing->status == 404);
  CHECK(json::parse(missing->body)["error"]["type"] == "not_found_error");
  auto stream = http.Post("/v1/chat/completions",
                          R"({"model": "qwen2_tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                              "stream": true, "n": 2})", "application/json");
  REQUIRE(stream);
  CHECK(stream->get_header_value("Content-Type").find("text/event-stream") == 0);
  CHECK(stream->body.find("data: {") == 0);
  CHECK(stream->body.find("\"delta\":{\"content\"") != std::string::npos);
  CHECK(stream->body.rfind("data: [DONE]\n\n") == stream->body.size() - 14);

  // Eight clients at once share decodes: the server's last line reports its largest batch.
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port);
      c.Post("/v1/completions", R"({"model": "qwen2_tiny", "prompt": "x", "max_tokens": 4, "seed": )" +
                                    std::to_string(i) + "}", "application/json");
    });
  for (auto& t : clients) t.join();
  server.child.signal(SIGTERM);
  REQUIRE(server.child.wait_for(std::chrono::seconds(20)) == 0);
  const std::regex largest(R"(largest (\d+)\))");
  std::smatch m;
  const std::string log = server.child.output();
  REQUIRE(std::regex_search(log, m, largest));
  MESSAGE("crucible serve: " << log.substr(log.rfind("stopped")));
  CHECK(std::stoi(m[1]) > 1);
}

TEST_CASE("a served model killed mid-use gives recorded policy errors, and the client recovers when it returns") {
  test::ScratchDir scratch("serve-kill");
  const auto relu = tasks::find_task("relu", test::tasks_dir());
  auto server = std::make_unique<Server>(scratch);
  const int port = server->port;
  policy::OpenAiPolicy p(client(server->base_url(), 1));
  CHECK_FALSE(p.sample(relu, 1).front().policy_error);
  server->child.signal(SIGKILL);
  server->child.wait_for(std::chrono::seconds(10));
  server.reset();
  const auto down = p.sample(relu, 2);
  REQUIRE(down.size() == 2);
  for (const auto& s : down) {
    CHECK(s.policy_error);
    CHECK(s.parse_error.find("no answer from") != std::string::npos);
    CHECK(s.output.empty());
  }
  Server again(scratch, port);  // the same address
  for (const auto& s : p.sample(relu, 2)) CHECK_FALSE(s.policy_error);
}

TEST_CASE("a PUCT best-of-N run samples from crucible serve through the client policy, end to end") {
  test::ScratchDir scratch("serve-run");
  Server server(scratch);
  const auto candidates = run_candidates(scratch, R"([experiment]
name = "served"
mode = "best_of_n"
[tasks]
names = ["relu"]
[policy]
kind = "openai"
base_url = ")" + server.base_url() + R"("
model = "qwen2_tiny"
max_tokens = 8
concurrency = 4
[best_of_n]
k = 6
group_size = 3
[search]
kind = "puct"
[eval]
devices = ["cpu"]
mode = "fast"
)");
  REQUIRE(candidates.size() == 6);
  int refined = 0;
  for (const auto& c : candidates) {
    CHECK(c["status"] == "parse_error");  // the tiny random model writes no code
    CHECK(c["reasons"][0]["code"] == "no_source");
    CHECK(!c["policy_output"].get<std::string>().empty());
    refined += c["parent"].is_number();
  }
  CHECK(refined == 3);  // the second group improves on archived states
}

TEST_CASE("a 3-turn GRPO run samples and refines through crucible serve, each turn its own record") {
  test::ScratchDir scratch("serve-multi-turn");
  Server server(scratch);
  const auto candidates = run_candidates(scratch, R"([experiment]
name = "served_turns"
mode = "grpo"
[tasks]
names = ["relu"]
[policy]
kind = "openai"
base_url = ")" + server.base_url() + R"("
model = "qwen2_tiny"
max_tokens = 8
[grpo]
steps = 1
batch_size = 1
group_size = 2
[multi_turn]
turns = 3
[advantage]
kind = "trloo"
[eval]
devices = ["cpu"]
mode = "fast"
)");
  REQUIRE(candidates.size() == 6);
  std::map<uint64_t, json> by_id;
  for (const auto& c : candidates) by_id[c["candidate_id"]] = c;
  std::map<int, int> per_turn;
  for (const auto& c : candidates) {
    CAPTURE(c.dump());
    ++per_turn[c["turn"].get<int>()];
    CHECK(!c["policy_output"].get<std::string>().empty());  // the served model answered every turn
    if (c["turn"] == 0) continue;
    REQUIRE(c["parent"].is_number());
    const auto& parent = by_id.at(c["parent"].get<uint64_t>());
    CHECK(parent["turn"].get<int>() == c["turn"].get<int>() - 1);
    CHECK(parent["trajectory"] == c["trajectory"]);
  }
  CHECK(per_turn == std::map<int, int>{{0, 2}, {1, 2}, {2, 2}});
}

namespace {

// A model's server on loopback that always answers with `content` (a model that writes a fixed reply, or a judge
// that writes a fixed verdict), counting requests. From request `answered + 1` on it answers 503 (a server going
// down) until it is destroyed; bound to `port` when given (a server back at its old address).
struct FixedReplyServer {
  explicit FixedReplyServer(const std::string& content, int answered = -1, int port = 0) : answered(answered) {
    const json reply{{"choices", {{{"index", 0}, {"finish_reason", "stop"},
                                   {"message", {{"role", "assistant"}, {"content", content}}}}}}};
    server.Post("/v1/chat/completions", [this, body = reply.dump()](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        last_request = req.body;
      }
      const int n = ++requests;
      if (this->answered >= 0 && n > this->answered) {
        res.status = 503;
        return;
      }
      res.set_content(body, "application/json");
    });
    this->port = port ? (server.bind_to_port("127.0.0.1", port) ? port : -1) : server.bind_to_any_port("127.0.0.1");
    REQUIRE(this->port > 0);
    thread = std::thread([this] { server.listen_after_bind(); });
    // stop() before the loop runs would be missed, and join() would wait for ever.
    REQUIRE(test::eventually([this] { return server.is_running(); }, std::chrono::seconds(10)));
  }
  ~FixedReplyServer() {
    server.stop();
    thread.join();
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port) + "/v1"; }
  httplib::Server server;
  std::thread thread;
  std::atomic<int> requests{0};
  std::mutex mutex;
  std::string last_request;  // the last request's body, as the server received it
  const int answered;
  int port = 0;
};

std::string judged_run(const std::string& base_url) {
  return R"([experiment]
name = "judged"
mode = "best_of_n"
[tasks]
names = ["relu"]
[best_of_n]
k = 2
group_size = 2
[judge]
base_url = ")" + base_url + R"("
model = "judge"
retries = 1
backoff_s = 0.05
weight = 2.0
when_correct_below = 1.5
[eval]
devices = ["cpu"]
mode = "fast"
)";
}

}  // namespace

TEST_CASE("LLM-as-judge: a judge's score adds to the reward with its weight, a dead or rambling judge is recorded, never fatal") {
  SUBCASE("a judge that answers") {
    FixedReplyServer judge(R"(Looks reasonable. {"score": 0.75, "reason": "straightforward loop"})");
    test::ScratchDir scratch("judge-ok");
    const auto candidates = run_candidates(scratch, judged_run("http://127.0.0.1:" + std::to_string(judge.port) + "/v1"));
    REQUIRE(candidates.size() == 2);
    for (const auto& c : candidates) {
      CAPTURE(c.dump());
      REQUIRE(c.contains("judge"));
      CHECK(c["judge"]["score"] == 0.75);
      CHECK(c["judge"]["note"] == "straightforward loop");
      const double speedup = c["speedup"].is_number() ? c["speedup"].get<double>() : 0.0;
      const bool noisy = c["reasons"].dump().find("timing_noisy") != std::string::npos;
      if (!noisy) CHECK(c["reward"].get<double>() == doctest::Approx(speedup + 2.0 * 0.75));
    }
  }
  SUBCASE("a judge that writes no score") {
    FixedReplyServer judge("I would rather not say.");
    test::ScratchDir scratch("judge-ramble");
    for (const auto& c : run_candidates(scratch, judged_run("http://127.0.0.1:" + std::to_string(judge.port) + "/v1"))) {
      CHECK(c["judge"]["score"].is_null());
      CHECK(c["judge"]["note"].get<std::string>().find("judge_error: the judge's reply holds no JSON object") == 0);
    }
  }
  SUBCASE("no judge at that address") {
    int free_port = 0;
    {
      FixedReplyServer gone("");
      free_port = gone.port;
    }
    test::ScratchDir scratch("judge-dead");
    for (const auto& c : run_candidates(scratch, judged_run("http://127.0.0.1:" + std::to_string(free_port) + "/v1"))) {
      CHECK(c["judge"]["score"].is_null());
      CHECK(c["judge"]["note"].get<std::string>().find("judge_error: no answer from") == 0);
      CHECK(c["status"] == "correct");  // the candidate's own verdict is untouched
    }
  }
}

TEST_CASE("the client policy with KernelBench's prompt sends it for the task's problem, and its Python block is the candidate") {
  const fs::path fixtures = test::source_dir() / "tests/fixtures/kernelbench";
  const std::string answer = test::read_file(fixtures / "relu" / "ok.py");
  FixedReplyServer model("Fused and fast:\n```python\n" + answer + "```\nThat is all.");
  policy::OpenAiPolicySetup setup = client(model.base_url());
  setup.language = {eval::Backend::cpu, eval::CandidateKind::kernelbench};  // [eval] candidate = "kernelbench"
  setup.config.prompt.kind = policy::PromptKind::kernelbench;
  setup.config.prompt.kernelbench.kernelbench_dir = fixtures / "checkout";
  policy::OpenAiPolicy p(setup);
  const auto task = tasks::load_task_file(fixtures / "tasks" / "kb_relu.toml");
  const auto samples = p.sample(task, 2);
  REQUIRE(samples.size() == 2);
  for (const auto& s : samples) {
    CHECK(s.parse_error.empty());
    CHECK(s.source == answer);
  }
  std::string sent;
  {
    std::lock_guard<std::mutex> lock(model.mutex);
    sent = json::parse(model.last_request)["messages"].back()["content"].get<std::string>();
  }
  const std::string problem = test::read_file(fixtures / "checkout/KernelBench/level1/19_ReLU.py");
  CHECK(sent == policy::kernelbench_prompt(problem, setup.config.prompt.kernelbench));
}

TEST_CASE("a run with a served model and KernelBench's prompt judges its ModelNew replies as KernelBench candidates") {
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  if (!eval::run_process({"/usr/bin/python3", "-c", "import torch"}, limits).ok()) {
    MESSAGE("skipped: KernelBench-format candidates run in /usr/bin/python3 with torch, absent here");
    return;
  }
  const fs::path fixtures = test::source_dir() / "tests/fixtures/kernelbench";
  FixedReplyServer model("```python\n" + test::read_file(fixtures / "relu" / "ok.py") + "```\n");
  test::ScratchDir scratch("serve-kernelbench");
  const auto candidates = run_candidates(scratch, R"([experiment]
name = "served-kb"
mode = "best_of_n"
[tasks]
names = ["kb_relu"]
dir = ")" + (fixtures / "tasks").string() + R"("
[policy]
kind = "openai"
base_url = ")" + model.base_url() + R"("
model = "m"
kernelbench_dir = ")" + (fixtures / "checkout").string() + R"("
[best_of_n]
k = 2
group_size = 2
[eval]
devices = ["cpu"]
candidate = "kernelbench"
mode = "fast"
call_timeout_s = 60.0
evaluation_budget_s = 600.0
)");
  REQUIRE(candidates.size() == 2);
  for (const auto& c : candidates) {
    CAPTURE(c.dump());
    CHECK(c["status"] == "correct");
  }
}

TEST_CASE("a run whose served model goes down mid-run records policy errors and goes on when the server returns") {
  test::ScratchDir scratch("serve-down-run");
  const std::string reply = "No code from me this time.";
  auto server = std::make_unique<FixedReplyServer>(reply, /*answered=*/2);
  const int port = server->port;
  const fs::path file = scratch.path() / "experiment.toml";
  // PUCT makes the groups one after another, so the outage falls between groups: some before, some during, the
  // rest after. Each failing request is tried 3 times over 1.5 s.
  test::write_file(file, R"([experiment]
name = "outage"
mode = "best_of_n"
[tasks]
names = ["relu"]
[policy]
kind = "openai"
base_url = ")" + server->base_url() + R"("
model = "m"
retries = 2
backoff_s = 0.5
[best_of_n]
k = 16
group_size = 2
[search]
kind = "puct"
[eval]
devices = ["cpu"]
mode = "fast"
)");
  const fs::path dir = scratch.path() / "run";
  test::Child run({"/usr/bin/env", "CRUCIBLE_CACHE_DIR=" + (scratch.path() / "cache").string(), CRUCIBLE_CLI_PATH, "run",
                   file.string(), "--out", dir.string()},
                  scratch.path() / "run.log");
  // The first group is answered; the second's first request gets a 503, then the server is gone (connections
  // refused) for 4 s, longer than any request's retries, and comes back at the same address.
  REQUIRE(test::eventually([&] { return server->requests >= 3; }, std::chrono::seconds(120)));
  server.reset();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  server = std::make_unique<FixedReplyServer>(reply, -1, port);
  const auto code = run.wait_for(std::chrono::seconds(300));
  INFO(run.output());
  REQUIRE(code == 0);

  auto candidates = run::read_jsonl(dir / "seed-1" / "candidates.jsonl");
  REQUIRE(candidates.size() == 16);
  std::sort(candidates.begin(), candidates.end(),
            [](const json& a, const json& b) { return a["times"]["generate"][0] < b["times"]["generate"][0]; });
  std::string pattern;  // one letter per candidate in sampling order: a (answered), e (policy error)
  for (const auto& c : candidates) {
    CAPTURE(c.dump());
    CHECK(c["status"] == "parse_error");
    const bool error = c["reasons"][0]["code"] == "policy_error";
    if (error) CHECK(c["reasons"][0]["detail"].get<std::string>().find("127.0.0.1") != std::string::npos);
    else CHECK(c["policy_output"] == reply);
    pattern += error ? 'e' : 'a';
  }
  MESSAGE("candidates in sampling order: " << pattern);
  CHECK(pattern.rfind("aa", 0) == 0);                  // answered before the outage
  CHECK(pattern.find("ee") != std::string::npos);      // a group lost to it
  CHECK(pattern.substr(pattern.size() - 2) == "aa");  // answered again after it
}

#include "openai_policy/openai_policy.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "config/text_file.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/utf8_text.h"
#include "policy/kernel_prompt.h"
#include "serving/openai_api.h"

namespace crucible::policy {
using nlohmann::json;

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_text(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// "http://host:port/v1" -> ("http://host:port", "/v1").
std::pair<std::string, std::string> split_url(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    throw std::invalid_argument("base_url must start with http:// or https://: " + url);
  const auto path = url.find('/', scheme + 3);
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, path), prefix};
}

}  // namespace

std::unique_ptr<Policy> make_openai_policy(OpenAiPolicySetup setup) {
  return std::make_unique<OpenAiPolicy>(std::move(setup));
}

OpenAiPolicy::OpenAiPolicy(OpenAiPolicySetup setup) : setup_(std::move(setup)) {
  const auto& o = setup_.config.openai;
  std::tie(scheme_host_port_, path_prefix_) = split_url(o.base_url);
  if (!o.api_key_env.empty()) {
    const char* key = std::getenv(o.api_key_env.c_str());
    if (!key) throw std::invalid_argument("the API key's environment variable " + o.api_key_env + " is not set");
    api_key_ = key;
  } else if (!o.api_key_file.empty()) {
    api_key_ = config::read_text_file(o.api_key_file);
    while (!api_key_.empty() && (api_key_.back() == '\n' || api_key_.back() == '\r' || api_key_.back() == ' '))
      api_key_.pop_back();
  }
  contract_header_ = config::read_text_file(eval::default_include_dir() / "crucible" / "kernel.h");
}

Sample OpenAiPolicy::complete_one(const eval::TaskSpec& task, const std::string& prompt, uint64_t seed) const {
  const auto& o = setup_.config.openai;
  json messages = json::array();
  if (!o.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", o.system_prompt}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  json body{{"model", o.model},         {"messages", messages},
            {"max_tokens", o.max_tokens}, {"temperature", setup_.config.temperature},
            {"top_p", o.top_p},         {"seed", seed % (uint64_t{1} << 52)},
            {"logprobs", true},         {"n", 1}};
  const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);

  Sample s;
  s.task = task.name;
  s.policy_version = version_;
  std::string failure;
  for (int attempt = 0; attempt <= o.retries; ++attempt) {
    if (attempt > 0) {  // backoff, doubling, at most 30 s
      const double wait = std::min(30.0, o.backoff_s * static_cast<double>(1 << std::min(attempt - 1, 10)));
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    httplib::Client client(scheme_host_port_);
    client.set_connection_timeout(std::chrono::duration<double>(std::min(o.timeout_s, 10.0)));
    client.set_read_timeout(std::chrono::duration<double>(o.timeout_s));
    client.set_write_timeout(std::chrono::duration<double>(o.timeout_s));
    httplib::Headers headers;
    if (!api_key_.empty()) headers.emplace("Authorization", "Bearer " + api_key_);
    auto res = client.Post(path_prefix_ + "/chat/completions", headers, payload, "application/json");
    if (!res) {
      failure = "no answer from " + o.base_url + " (" + httplib::to_string(res.error()) + ")";
      continue;  // down, refused or timed out: retried
    }
    if (res->status == 429 || res->status >= 500) {
      failure = "HTTP " + std::to_string(res->status) + " from " + o.base_url;
      continue;
    }
    try {
      auto choices = serving::parse_response(serving::Endpoint::chat, res->body);
      if (choices.empty()) throw std::invalid_argument("the response has no choices");
      auto& c = choices.front();
      if (auto code = extract_code(c.text)) s.source = std::move(*code);
      else
        s.parse_error = c.finish_reason == "length" ? "the reply was cut off at max_tokens = " +
                                                          std::to_string(o.max_tokens) + " before a complete code block"
                                                    : "the reply has no complete fenced code block";
      s.output = std::move(c.text);
      s.logprobs = std::move(c.logprobs);
      return s;
    } catch (const serving::ApiError& e) {
      failure = "the server refused the request (HTTP " + std::to_string(res->status) + "): " + e.what();
      break;  // a request the server rejects fails the same way again
    } catch (const std::exception& e) {
      failure = std::string("malformed answer from the server: ") + e.what();
      break;
    }
  }
  s.policy_error = true;
  s.parse_error = eval::valid_utf8_prefix(failure, 1000);
  return s;
}

std::vector<Sample> OpenAiPolicy::complete(const eval::TaskSpec& task, const std::vector<std::string>& prompts) {
  std::vector<Sample> out(prompts.size());
  std::vector<uint64_t> seeds;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    seeds.push_back(splitmix(setup_.seed ^ splitmix(version_ ^ splitmix(hash_text(task.name) ^ splitmix(draws_++)))));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < prompts.size();) out[i] = complete_one(task, prompts[i], seeds[i]);
  };
  const std::size_t threads = std::min<std::size_t>(prompts.size(), static_cast<std::size_t>(setup_.config.openai.concurrency));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

std::vector<Sample> OpenAiPolicy::sample(const eval::TaskSpec& task, int n) {
  const std::string prompt = kernel_prompt(task, setup_.backend, contract_header_);
  return complete(task, std::vector<std::string>(static_cast<std::size_t>(std::max(0, n)), prompt));
}

std::vector<Sample> OpenAiPolicy::refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) {
  std::vector<std::string> prompts;
  for (const auto& a : attempts) prompts.push_back(refinement_prompt(task, setup_.backend, contract_header_, a));
  return complete(task, prompts);
}

void OpenAiPolicy::update(const std::vector<Sample>& samples, const std::vector<double>& advantages) {
  if (samples.size() != advantages.size()) throw std::invalid_argument("update: one advantage per sample");
  ++version_;  // the served weights stay as they are
}

std::string OpenAiPolicy::snapshot() const { return json{{"kind", "openai"}, {"version", version_}}.dump(); }

void OpenAiPolicy::restore(const std::string& snapshot) {
  const json j = json::parse(snapshot, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "openai" || !j.contains("version") ||
      !j["version"].is_number_unsigned())
    throw std::invalid_argument("not an openai policy snapshot: " + snapshot.substr(0, 200));
  version_ = j["version"].get<uint64_t>();
}

}  // namespace crucible::policy

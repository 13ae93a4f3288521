#include "openai_policy/chat_client.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "config/text_file.h"
#include "crucible/eval/utf8_text.h"
#include "serving/openai_api.h"

namespace crucible::policy {
using nlohmann::json;

namespace {

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

ChatClient::ChatClient(experiment::OpenAiConfig config) : config_(std::move(config)) {
  std::tie(scheme_host_port_, path_prefix_) = split_url(config_.base_url);
  if (!config_.api_key_env.empty()) {
    const char* key = std::getenv(config_.api_key_env.c_str());
    if (!key) throw std::invalid_argument("the API key's environment variable " + config_.api_key_env + " is not set");
    api_key_ = key;
  } else if (!config_.api_key_file.empty()) {
    api_key_ = config::read_text_file(config_.api_key_file);
    while (!api_key_.empty() && (api_key_.back() == '\n' || api_key_.back() == '\r' || api_key_.back() == ' '))
      api_key_.pop_back();
  }
}

ChatResult ChatClient::chat(const std::string& user_prompt, double temperature, uint64_t seed) const {
  const auto& o = config_;
  json messages = json::array();
  if (!o.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", o.system_prompt}});
  messages.push_back({{"role", "user"}, {"content", user_prompt}});
  json body{{"model", o.model},         {"messages", messages},
            {"max_tokens", o.max_tokens}, {"temperature", temperature},
            {"top_p", o.top_p},         {"seed", seed % (uint64_t{1} << 52)},
            {"logprobs", true},         {"n", 1}};
  const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
  ChatResult result;
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
      result.ok = true;
      result.text = std::move(choices.front().text);
      result.finish_reason = std::move(choices.front().finish_reason);
      result.logprobs = std::move(choices.front().logprobs);
      return result;
    } catch (const serving::ApiError& e) {
      failure = "the server refused the request (HTTP " + std::to_string(res->status) + "): " + e.what();
      break;  // a request the server rejects fails the same way again
    } catch (const std::exception& e) {
      failure = std::string("malformed answer from the server: ") + e.what();
      break;
    }
  }
  result.error = eval::valid_utf8_prefix(eval::valid_utf8(failure), 1000);
  return result;
}

}  // namespace crucible::policy

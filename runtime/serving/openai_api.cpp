#include "serving/openai_api.h"

#include <nlohmann/json.hpp>

namespace crucible::serving {
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, "invalid_request_error", message); }

template <class T>
std::optional<T> optional_number(const json& j, const char* key, double low, double high) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= low && v <= high))
    bad(std::string("'") + key + "' must be between " + json(low).dump() + " and " + json(high).dump());
  return static_cast<T>(v);
}

}  // namespace

// A message's content: a string, or an array of parts of which only text parts ({"type": "text", "text": ...}) are
// understood; they are joined in order.
std::string message_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad("a message's 'content' must be a string or an array of text parts");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      bad("only text parts ({\"type\": \"text\", \"text\": ...}) are understood in a message's 'content'");
    text += part["text"].get<std::string>();
  }
  return text;
}

ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ApiLimits& limits) {
  if (body.size() > limits.max_body_bytes) bad("the request body exceeds " + std::to_string(limits.max_body_bytes) + " bytes");
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad("the request body is not a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  if (!j.contains("model") || !j["model"].is_string()) bad("'model' is required (a string)");
  r.model = j["model"].get<std::string>();
  if (endpoint == Endpoint::chat) {
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
      bad("'messages' is required (a non-empty array)");
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
        bad("each message needs a 'role' and a 'content'");
      const std::string role = m["role"];
      if (role != "system" && role != "user" && role != "assistant") bad("unknown message role '" + role + "'");
      r.messages.push_back({role, message_text(m["content"])});
    }
  } else {
    if (!j.contains("prompt") || !j["prompt"].is_string()) bad("'prompt' is required (a string)");
    r.prompt = j["prompt"].get<std::string>();
  }
  r.n = optional_number<int>(j, "n", 1, limits.max_n).value_or(1);
  const char* tokens_key = j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.max_tokens = optional_number<int64_t>(j, tokens_key, 1, static_cast<double>(limits.max_tokens)).value_or(256);
  r.temperature = optional_number<double>(j, "temperature", 0.0, 2.0);
  r.top_p = optional_number<double>(j, "top_p", 1e-9, 1.0);
  r.top_k = optional_number<int64_t>(j, "top_k", -1, 1e6);
  if (r.top_k && *r.top_k < 0) r.top_k.reset();  // vLLM's "off"
  r.seed = optional_number<uint64_t>(j, "seed", 0, 9.0e15);
  if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) {
    // chat: a boolean; completions: a number of alternatives (only the sampled token's is returned)
    if (it->is_boolean()) r.logprobs = it->get<bool>();
    else if (it->is_number()) r.logprobs = it->get<double>() >= 0;
    else bad("'logprobs' must be a boolean or a number");
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("'stream' must be a boolean");
    r.stream = it->get<bool>();
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) r.stop.push_back(it->get<std::string>());
    else if (it->is_array() && it->size() <= 4 && std::all_of(it->begin(), it->end(), [](const json& s) { return s.is_string(); }))
      for (const auto& s : *it) r.stop.push_back(s.get<std::string>());
    else bad("'stop' must be a string or up to 4 strings");
  }
  return r;
}

std::string error_json(const ApiError& e) {
  return json{{"error", {{"message", e.what()}, {"type", e.type}, {"code", e.status}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string finish_reason(const std::string& generator_reason) {
  return generator_reason == "length" ? "length" : "stop";
}

std::vector<ApiChoice> parse_response(Endpoint endpoint, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("the response is not a JSON object");
  if (j.contains("error")) {
    const auto& e = j["error"];
    const std::string message = e.is_object() && e.contains("message") && e["message"].is_string()
                                    ? e["message"].get<std::string>()
                                    : e.dump();
    const int status = e.is_object() && e.contains("code") && e["code"].is_number_integer() ? e["code"].get<int>() : 500;
    throw ApiError(status, e.is_object() ? e.value("type", "server_error") : "server_error", message);
  }
  if (!j.contains("choices") || !j["choices"].is_array()) throw std::invalid_argument("the response has no choices");
  std::vector<ApiChoice> out;
  for (const auto& c : j["choices"]) {
    ApiChoice choice;
    const json* text = nullptr;
    if (endpoint == Endpoint::chat && c.contains("message") && c["message"].is_object() && c["message"].contains("content"))
      text = &c["message"]["content"];
    else if (endpoint == Endpoint::completion && c.contains("text"))
      text = &c["text"];
    if (!text || !text->is_string()) throw std::invalid_argument("a choice has no text");
    choice.text = text->get<std::string>();
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) choice.finish_reason = c["finish_reason"];
    if (c.contains("logprobs") && c["logprobs"].is_object()) {
      const auto& lp = c["logprobs"];
      if (lp.contains("content") && lp["content"].is_array()) {
        for (const auto& t : lp["content"])
          if (t.is_object() && t.contains("logprob") && t["logprob"].is_number()) choice.logprobs.push_back(t["logprob"].get<float>());
      } else if (lp.contains("token_logprobs") && lp["token_logprobs"].is_array()) {
        for (const auto& v : lp["token_logprobs"])
          if (v.is_number()) choice.logprobs.push_back(v.get<float>());
      }
    }
    out.push_back(std::move(choice));
  }
  return out;
}

}  // namespace crucible::serving

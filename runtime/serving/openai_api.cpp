#include "serving/openai_api.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "lm/tokenizer/utf8.h"

namespace crucible::serving {
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& param = "") {
  throw ApiError(400, "invalid_request_error", message, param);
}

std::string range_text(double low, double high) { return json(low).dump() + " and " + json(high).dump(); }

std::optional<double> optional_number(const json& j, const char* key, double low, double high) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(std::string("'") + key + "' must be a number", key);
  const double v = it->get<double>();
  if (!(v >= low && v <= high)) bad(std::string("'") + key + "' must be between " + range_text(low, high), key);
  return v;
}

// A count or a seed: a JSON integer (2.0 is one; 1.9 is refused, never rounded down) within [low, high].
std::optional<int64_t> optional_integer(const json& j, const char* key, double low, double high) {
  const auto v = optional_number(j, key, low, high);
  if (!v) return std::nullopt;
  if (*v != std::floor(*v)) bad(std::string("'") + key + "' must be an integer, not " + j[key].dump(), key);
  return j[key].is_number_float() ? static_cast<int64_t>(*v) : j[key].get<int64_t>();
}

bool is_valid_utf8(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    const lm::Utf8Step step = lm::read_utf8(text, pos);
    if (!step.valid) return false;
    pos += step.length;
  }
  return true;
}

json parse_body(const std::string& body, const ApiLimits& limits) {
  if (body.size() > limits.max_body_bytes) throw ApiError(413, "invalid_request_error", "the request body exceeds " + std::to_string(limits.max_body_bytes) + " bytes");
  if (!is_valid_utf8(body)) bad("the request body is not valid UTF-8");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    bad(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("the request body is not a JSON object");
  return j;
}

}  // namespace

// A message's content: a string, or an array of parts of which only text parts ({"type": "text", "text": ...}) are
// understood; they are joined in order.
std::string message_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad("a message's 'content' must be a string or an array of text parts", "messages");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      bad("only text parts ({\"type\": \"text\", \"text\": ...}) are understood in a message's 'content'", "messages");
    text += part["text"].get<std::string>();
  }
  return text;
}

namespace {

// The conversation (chat) or the raw prompt (completions).
void parse_prompt(const json& j, ApiRequest& r) {
  if (r.endpoint == Endpoint::completion) {
    if (!j.contains("prompt") || !j["prompt"].is_string()) bad("'prompt' is required (a string)", "prompt");
    r.prompt = j["prompt"].get<std::string>();
    return;
  }
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    bad("'messages' is required (a non-empty array)", "messages");
  for (const auto& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
      bad("each message needs a 'role' and a 'content'", "messages");
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant") bad("unknown message role '" + role + "'", "messages");
    r.messages.push_back({role, message_text(m["content"])});
  }
}

void parse_sampling(const json& j, const ApiLimits& limits, ApiRequest& r) {
  r.n = static_cast<int>(optional_integer(j, "n", 1, limits.max_n).value_or(1));
  // Both names are checked (a null one counts as absent); the newer one wins where both are given.
  const auto tokens_limit = static_cast<double>(limits.max_tokens);
  const auto max_tokens = optional_integer(j, "max_tokens", 1, tokens_limit);
  const auto max_completion_tokens = optional_integer(j, "max_completion_tokens", 1, tokens_limit);
  r.max_tokens = max_completion_tokens.value_or(max_tokens.value_or(256));
  r.temperature = optional_number(j, "temperature", 0.0, 2.0);
  r.top_p = optional_number(j, "top_p", 1e-9, 1.0);
  r.top_k = optional_integer(j, "top_k", -1, 1e6);
  if (r.top_k && *r.top_k < 0) r.top_k.reset();  // vLLM's "off"
  if (const auto seed = optional_integer(j, "seed", 0, 9.0e15)) r.seed = static_cast<uint64_t>(*seed);
}

void parse_output(const json& j, ApiRequest& r) {
  if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) {
    // chat: a boolean; completions: a number of alternatives (only the sampled token's is returned)
    if (it->is_boolean()) r.logprobs = it->get<bool>();
    else if (it->is_number()) r.logprobs = it->get<double>() >= 0;
    else bad("'logprobs' must be a boolean or a number", "logprobs");
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("'stream' must be a boolean", "stream");
    r.stream = it->get<bool>();
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) r.stop.push_back(it->get<std::string>());
    else if (it->is_array() && it->size() <= 4 && std::all_of(it->begin(), it->end(), [](const json& s) { return s.is_string(); }))
      for (const auto& s : *it) r.stop.push_back(s.get<std::string>());
    else bad("'stop' must be a string or up to 4 strings", "stop");
  }
}

}  // namespace

ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ApiLimits& limits) {
  const json j = parse_body(body, limits);
  ApiRequest r;
  r.endpoint = endpoint;
  if (!j.contains("model") || !j["model"].is_string()) bad("'model' is required (a string)", "model");
  r.model = j["model"].get<std::string>();
  parse_prompt(j, r);
  parse_sampling(j, limits, r);
  parse_output(j, r);
  return r;
}

std::string error_json(const ApiError& e) {
  const json param = e.param.empty() ? json(nullptr) : json(e.param);
  return json{{"error", {{"message", e.what()}, {"type", e.type}, {"param", param}, {"code", e.status}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

ApiError http_status_error(int status) {
  switch (status) {
    case 404: return {404, "not_found_error", "no such route (the API serves GET /v1/models, GET /health, "
                                              "POST /v1/chat/completions and POST /v1/completions)"};
    case 405: return {405, "invalid_request_error", "this route does not take that method"};
    case 408: return {408, "invalid_request_error", "the request did not arrive in time"};
    case 413: return {413, "invalid_request_error", "the request is too large"};
    case 414: return {414, "invalid_request_error", "the request line is too long"};
    case 415: return {415, "invalid_request_error", "the body must be JSON"};
    case 431: return {431, "invalid_request_error", "the request's headers are too large"};
    case 503: return {503, "server_error", "the server is busy or stopping; try again"};
  }
  if (status >= 500) return {status, "server_error", "the server failed to answer"};
  return {status, "invalid_request_error", "the request is malformed"};
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
    // A chat message whose content is null is a reply without an answer (cut off while reasoning): its text is empty.
    const bool no_answer = endpoint == Endpoint::chat && text && text->is_null();
    if (!text || (!text->is_string() && !no_answer)) throw std::invalid_argument("a choice has no text");
    if (!no_answer) choice.text = text->get<std::string>();
    if (endpoint == Endpoint::chat) {
      const auto& m = c["message"];
      for (const char* key : {"reasoning_content", "reasoning"})  // vLLM's name, then newer servers'
        if (!choice.reasoning && m.contains(key) && m[key].is_string()) choice.reasoning = m[key].get<std::string>();
    }
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

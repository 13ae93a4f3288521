#pragma once
// Rendering of responses and events (templates over how a token is shown; see openai_api.h).
#include <nlohmann/json.hpp>

namespace crucible::serving {

namespace detail {
template <class TokenText>
nlohmann::json choice_logprobs(const ApiRequest& request, const lm::TextCompletion& c, TokenText token_text) {
  using nlohmann::json;
  json content = json::array();
  for (std::size_t t = 0; t < c.tokens.size(); ++t) {
    const double lp = t < c.model_logprobs.size() ? c.model_logprobs[t] : 0.0;  // the model's, before temperature
    content.push_back({{"token", token_text(c.tokens[t])}, {"logprob", lp}, {"token_id", c.tokens[t]}});
  }
  if (request.endpoint == Endpoint::chat) return {{"content", content}};
  json tokens = json::array(), values = json::array();
  for (const auto& e : content) tokens.push_back(e["token"]), values.push_back(e["logprob"]);
  return {{"tokens", tokens}, {"token_logprobs", values}};
}
// A chat choice's message fields: content (null without an answer) and reasoning_content when there is thinking.
inline nlohmann::json chat_fields(const lm::TextCompletion& c, const std::vector<lm::ReplyParts>& parts,
                                  std::size_t i) {
  using nlohmann::json;
  if (i >= parts.size()) return {{"content", c.text}};
  json fields{{"content", parts[i].content ? json(*parts[i].content) : json(nullptr)}};
  if (parts[i].reasoning) fields["reasoning_content"] = *parts[i].reasoning;
  return fields;
}
}  // namespace detail

template <class TokenText>
std::string response_json(const ApiRequest& request, const std::vector<lm::TextCompletion>& completions,
                          const ResponseIds& ids, TokenText token_text, const std::vector<lm::ReplyParts>& parts) {
  using nlohmann::json;
  const bool chat = request.endpoint == Endpoint::chat;
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    json choice{{"index", i}, {"finish_reason", finish_reason(c.finish_reason)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}};
      choice["message"].update(detail::chat_fields(c, parts, i));
    }
    else choice["text"] = c.text;
    choice["logprobs"] = request.logprobs ? detail::choice_logprobs(request, c, token_text) : json(nullptr);
    choices.push_back(std::move(choice));
    prompt_tokens = static_cast<int64_t>(c.prompt_tokens.size());
    completion_tokens += static_cast<int64_t>(c.tokens.size());
  }
  json out{{"id", ids.id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", ids.created},
           {"model", request.model}, {"choices", choices},
           {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}}}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

template <class TokenText>
std::string stream_events(const ApiRequest& request, const std::vector<lm::TextCompletion>& completions,
                          const ResponseIds& ids, TokenText token_text, const std::vector<lm::ReplyParts>& parts) {
  using nlohmann::json;
  const bool chat = request.endpoint == Endpoint::chat;
  std::string out;
  auto event = [&](json choice) {
    json chunk{{"id", ids.id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
               {"created", ids.created}, {"model", request.model}, {"choices", json::array({std::move(choice)})}};
    out += "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    if (chat) event({{"index", i}, {"delta", {{"role", "assistant"}}}, {"finish_reason", nullptr}});
    json text{{"index", i}, {"finish_reason", nullptr}};
    if (chat) {
      json fields = detail::chat_fields(c, parts, i);
      if (fields.contains("reasoning_content"))  // the thinking comes first, in a chunk of its own
        event({{"index", i}, {"delta", {{"reasoning_content", fields["reasoning_content"]}}}, {"finish_reason", nullptr}});
      text["delta"] = {{"content", fields["content"].is_null() ? json("") : fields["content"]}};
    } else {
      text["text"] = c.text;
    }
    if (request.logprobs) text["logprobs"] = detail::choice_logprobs(request, c, token_text);
    event(std::move(text));
    json end{{"index", i}, {"finish_reason", finish_reason(c.finish_reason)}};
    if (chat) end["delta"] = json::object();
    else end["text"] = "";
    event(std::move(end));
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace crucible::serving

#pragma once
// The OpenAI-compatible HTTP API as typed values (vLLM's subset that RL trainers use): requests to
// /v1/chat/completions and /v1/completions parsed once into ApiRequest, responses and streamed events rendered from
// completions. No HTTP and no model here: `crucible serve` and the client policy are the two ends that use it.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lm/model/language_model.h"
#include "lm/tokenizer/chat_reply.h"

namespace crucible::serving {

enum class Endpoint { chat, completion };

struct ApiRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  std::vector<lm::ChatMessage> messages;  // chat
  std::string prompt;                     // completion
  int n = 1;
  int64_t max_tokens = 256;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  bool logprobs = false;
  bool stream = false;
  std::vector<std::string> stop;
};

// An error the server answers with (HTTP status, OpenAI's error type, the request field at fault) and the client
// reads back.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // invalid_request_error, not_found_error, server_error
  std::string param;  // the field named by the message; empty: none
};

struct ApiLimits {
  int max_n = 64;
  int64_t max_tokens = 4096;
  std::size_t max_body_bytes = 4 << 20;
};

// Throws ApiError (400) naming the field that is missing, of the wrong type (a count that is not an integer) or out of
// range, or saying that the body is not valid UTF-8 or not a JSON object.
ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ApiLimits& limits = {});

// OpenAI's error shape: {"error": {"message", "type", "param" (null when none), "code" (the HTTP status, as vLLM)}}.
std::string error_json(const ApiError& error);
// The error a bare HTTP status stands for (a route that does not exist, a body over the limit, a malformed request
// line), for answers the HTTP layer gives before a request reaches the API.
ApiError http_status_error(int status);

// One response for the request's n completions. `token_text` renders a token for logprobs. A chat choice's message
// is `parts[i]` when given (its answer as "content", null when there is none, and its thinking as
// "reasoning_content", as vLLM answers with a reasoning parser), else the completion's whole text.
struct ResponseIds {
  std::string id;
  int64_t created = 0;
};
template <class TokenText>
std::string response_json(const ApiRequest& request, const std::vector<lm::TextCompletion>& completions,
                          const ResponseIds& ids, TokenText token_text, const std::vector<lm::ReplyParts>& parts = {});

// The same as server-sent events: per choice a role chunk (chat), its reasoning and its text, and its finish reason,
// then [DONE].
template <class TokenText>
std::string stream_events(const ApiRequest& request, const std::vector<lm::TextCompletion>& completions,
                          const ResponseIds& ids, TokenText token_text, const std::vector<lm::ReplyParts>& parts = {});

// OpenAI's finish reasons from the generator's: stop_token and stop_string -> "stop", length -> "length".
std::string finish_reason(const std::string& generator_reason);

// What a client reads back from a chat or completion response: each choice's text, finish reason and (when asked)
// per-token log-probabilities. Throws ApiError for an error body, std::invalid_argument for anything malformed.
struct ApiChoice {
  std::string text;  // a chat message's content ("" when it is null: a reply without an answer)
  std::optional<std::string> reasoning;  // a chat message's reasoning_content, when the server sent one
  std::string finish_reason;
  std::vector<float> logprobs;
};
std::vector<ApiChoice> parse_response(Endpoint endpoint, const std::string& body);

}  // namespace crucible::serving

#include "serving/openai_api_render.h"

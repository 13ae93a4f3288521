#pragma once
// One chat completion from an OpenAI-compatible server, with the client's timeouts and retries (connection failures,
// timeouts, HTTP 429 and 5xx are retried with doubling backoff; a request the server refuses is not). Used by the
// served-model policy and the LLM judge. Never throws for what the server does: a failure is a result.
#include <cstdint>
#include <string>
#include <vector>

#include "experiment/experiment.h"

namespace crucible::policy {

struct ChatResult {
  bool ok = false;
  std::string text;
  std::string finish_reason;
  std::vector<float> logprobs;
  std::string error;  // why not ok (bounded, valid UTF-8)
};

class ChatClient {
 public:
  // Reads the API key (environment variable or file); throws std::invalid_argument naming what is missing.
  explicit ChatClient(experiment::OpenAiConfig config);
  ChatResult chat(const std::string& user_prompt, double temperature, uint64_t seed) const;
  const experiment::OpenAiConfig& config() const { return config_; }

 private:
  experiment::OpenAiConfig config_;
  std::string api_key_;
  std::string scheme_host_port_, path_prefix_;  // "http://127.0.0.1:8000", "/v1"
};

}  // namespace crucible::policy

#pragma once
// A conversation's messages and the options that shape its rendering, shared by every chat format.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"

namespace crucible::lm {

// How long gpt-oss reasons before answering: the harmony system message's "Reasoning: ..." line.
enum class ReasoningEffort { low, medium, high };
std::string_view reasoning_effort_name(ReasoningEffort effort);
// "low", "medium" or "high"; nullopt for anything else.
std::optional<ReasoningEffort> parse_reasoning_effort(std::string_view name);

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
  // An assistant turn's thinking before its answer (Qwen3's <think> block, harmony's analysis channel). Rendered only
  // where the format keeps it: on the last assistant turn after the last user message, never on earlier turns.
  std::string reasoning;
};

struct ChatOptions {
  // Used as the system message when the conversation does not start with one. Without it ChatML inserts
  // "You are a helpful assistant.", and Llama-3 and Qwen3 add no system block. Harmony renders it as the developer
  // message's instructions.
  std::optional<std::string> system_prompt;
  bool add_generation_prompt = true;             // end with the assistant header
  std::string bos_token = "<|begin_of_text|>";  // Llama-3 only
  ReasoningEffort reasoning_effort = ReasoningEffort::medium;  // harmony only
  std::string current_date;  // harmony only: "Current date: ..." in the system message; empty: no such line
  bool enable_thinking = true;  // Qwen3 only: false starts the reply with an empty <think> block
};

// The rendered text and which of its bytes the template wrote (its markers, the BOS, the default system prompt), as
// byte ranges [first, second): the rest is the messages' roles and content, whose special tokens are plain text.
struct RenderedChat {
  std::string text;
  Tokenizer::TextSpans template_spans;
};

}  // namespace crucible::lm

#include "lm/tokenizer/chat_reply.h"

#include <algorithm>
#include <stdexcept>

#include "lm/tokenizer/harmony_reply.h"

namespace crucible::lm {
namespace {

// Qwen3 thinks first: the answer follows the first </think> (which closes the block; the tokens <think> and </think>
// are always the added tokens, so the answer's own text cannot spell them). Thinking that never closes has no answer.
ReplyAnswer qwen3_answer(const std::string& text) {
  const auto close = text.find("</think>");
  if (close != std::string::npos) {
    std::string answer = text.substr(close + 8);
    answer.erase(0, std::min(answer.find_first_not_of('\n'), answer.size()));
    return {answer, ""};
  }
  if (text.find("<think>") != std::string::npos)
    return {std::nullopt, "the reply never closed its <think> block, so it has no answer"};
  return {text, ""};  // thinking off: the prompt already closed the block
}

// Qwen3's thinking: between <think> and the first </think> (or the reply's end, when it never closes).
std::optional<std::string> qwen3_thinking(const std::string& text) {
  const auto open = text.find("<think>");
  const auto close = text.find("</think>");
  if (open == std::string::npos || (close != std::string::npos && close < open)) return std::nullopt;
  std::string thinking = text.substr(open + 7, close == std::string::npos ? std::string::npos : close - open - 7);
  thinking.erase(0, std::min(thinking.find_first_not_of('\n'), thinking.size()));
  thinking.erase(thinking.find_last_not_of('\n') + 1);
  return thinking;
}

// Every analysis message's text, in order, a blank line between two.
std::optional<std::string> harmony_analysis(const HarmonyReply& reply) {
  std::optional<std::string> analysis;
  for (const auto& m : reply.messages) {
    if (m.channel != "analysis") continue;
    analysis = analysis ? *analysis + "\n\n" + m.content : m.content;
  }
  return analysis;
}

}  // namespace

ReplyParts reply_parts(ChatFormat format, const std::vector<TokenId>& tokens, const std::string& text,
                       const Tokenizer& tokenizer) {
  switch (format) {
    case ChatFormat::chatml:
    case ChatFormat::llama3: return {text, std::nullopt};
    case ChatFormat::qwen3: return {qwen3_answer(text).text, qwen3_thinking(text)};
    case ChatFormat::harmony: {
      HarmonyReply reply = parse_harmony_reply(tokens, tokenizer);
      return {std::move(reply.final_text), harmony_analysis(reply)};
    }
  }
  throw std::logic_error("reply_parts: unknown chat format");
}

ReplyAnswer reply_answer(ChatFormat format, const std::vector<TokenId>& tokens, const std::string& text,
                         const Tokenizer& tokenizer) {
  switch (format) {
    case ChatFormat::chatml:
    case ChatFormat::llama3: return {text, ""};
    case ChatFormat::qwen3: return qwen3_answer(text);
    case ChatFormat::harmony: {
      HarmonyReply reply = parse_harmony_reply(tokens, tokenizer);
      return {std::move(reply.final_text), std::move(reply.error)};
    }
  }
  throw std::logic_error("reply_answer: unknown chat format");
}

std::string reply_header(ChatFormat format) {
  return format == ChatFormat::harmony ? "<|channel|>final<|message|>" : "";
}

std::vector<std::string> reply_stop_tokens(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml:
    case ChatFormat::qwen3: return {"<|im_end|>"};
    case ChatFormat::llama3: return {"<|eot_id|>"};
    case ChatFormat::harmony: return {"<|return|>", "<|call|>"};
  }
  throw std::logic_error("reply_stop_tokens: unknown chat format");
}

}  // namespace crucible::lm

#pragma once
// A gpt-oss reply (the tokens sampled after the prompt's "<|start|>assistant") read as harmony messages. Markers are
// recognised by token id only: text in a message that spells "<|channel|>final<|message|>" is ordinary tokens and stays
// content, so a message cannot forge a channel.
#include <optional>
#include <string>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"

namespace crucible::lm {

struct HarmonyMessage {
  enum class End { end, return_, call, cut_off };  // <|end|>, <|return|>, <|call|>, or the tokens ran out
  std::string role = "assistant";  // the first message's role is the prompt's; later ones name theirs after <|start|>
  std::string channel;             // analysis, commentary, final; empty when the header names none
  std::string recipient;           // a tool call's "to=..." target; empty for a message to the user
  std::string content;             // valid UTF-8
  End end = End::cut_off;
};

struct HarmonyReply {
  std::vector<HarmonyMessage> messages;
  // The content of the last assistant message in the final channel (also one cut off: its text may still be whole).
  std::optional<std::string> final_text;
  bool cut_off = false;  // the tokens ended before <|return|> or <|call|>
  std::string error;     // why there is no final message; empty when final_text is set
};

// Throws std::invalid_argument when the tokenizer lacks harmony's tokens (not a gpt-oss tokenizer).
HarmonyReply parse_harmony_reply(const std::vector<TokenId>& tokens, const Tokenizer& tokenizer);

}  // namespace crucible::lm

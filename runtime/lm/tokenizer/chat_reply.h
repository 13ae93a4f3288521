#pragma once
// The answer in a model's reply, by chat format: harmony's final channel, the text after Qwen3's thinking, or the
// whole reply for ChatML and Llama-3. The answer is where a kernel is looked for: thinking is never mistaken for it.
#include <optional>
#include <string>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/tokenizer/chat_template.h"

namespace crucible::lm {

struct ReplyAnswer {
  std::optional<std::string> text;  // the answer; nullopt when the reply has none
  std::string error;                // why there is none (a run's parse_error); empty when there is one
};

// `tokens` are the sampled ids (harmony is read from them), `text` their decoded text (the other formats).
ReplyAnswer reply_answer(ChatFormat format, const std::vector<TokenId>& tokens, const std::string& text,
                         const Tokenizer& tokenizer);

// A reply as a chat API shows it (vLLM's reasoning parsers): the answer as content (nullopt when the reply has none:
// cut off while thinking) and the thinking as reasoning (harmony's analysis messages, Qwen3's <think> block; nullopt
// when there is none).
struct ReplyParts {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
};
ReplyParts reply_parts(ChatFormat format, const std::vector<TokenId>& tokens, const std::string& text,
                       const Tokenizer& tokenizer);

// What a reply starts with when a model is trained to write an answer after the chat prompt (which ends where the
// assistant's turn begins): harmony's final-channel header, "" for the other formats. Special tokens only: encode it
// with special tokens parsed, and the answer after it as text.
std::string reply_header(ChatFormat format);

// The special tokens that end a reply in this format (<|im_end|>; <|eot_id|>; harmony's <|return|> and <|call|>, not
// <|end|>, which only closes the analysis message before the final one).
std::vector<std::string> reply_stop_tokens(ChatFormat format);

}  // namespace crucible::lm

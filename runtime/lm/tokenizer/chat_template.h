#pragma once
// Chat prompts in the formats the supported models use, rendered exactly as their templates do.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/tokenizer/chat_message.h"

namespace crucible::lm {

enum class ChatFormat {
  chatml,   // Qwen2: <|im_start|>role\ncontent<|im_end|>\n
  llama3,   // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  qwen3,    // ChatML without a default system prompt, with the <think> block (chat_qwen3.h)
  harmony,  // gpt-oss: <|start|>role<|channel|>...<|message|>content<|end|> (chat_harmony.h)
};

std::string_view chat_format_name(ChatFormat format);
// "chatml", "llama3", "qwen3" or "harmony"; nullopt for anything else.
std::optional<ChatFormat> parse_chat_format(std::string_view name);

// harmony when the tokenizer knows <|start|>, <|channel|> and <|message|>, chatml when it knows <|im_start|>, llama3
// when it knows <|start_header_id|>; throws otherwise. (Qwen3 shares Qwen2's tokens: its format comes from the model.)
ChatFormat detect_chat_format(const Tokenizer& tokenizer);

// The format a model's config.json `model_type` calls for: harmony for "gpt_oss", qwen3 for "qwen3", otherwise what
// the tokenizer's tokens say (detect_chat_format; throws when they say nothing).
ChatFormat chat_format_for_model(const std::string& model_type, const Tokenizer& tokenizer);

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options = {});
// The same text with the byte ranges the template wrote (RenderedChat).
RenderedChat render_chat_spans(ChatFormat format, const std::vector<ChatMessage>& messages,
                               const ChatOptions& options = {});

}  // namespace crucible::lm

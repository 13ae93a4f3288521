#pragma once
// Chat prompts in the two formats the supported models use, rendered exactly as their Jinja templates do.
#include <optional>
#include <string>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"

namespace crucible::lm {

enum class ChatFormat {
  chatml,  // Qwen2: <|im_start|>role\ncontent<|im_end|>\n
  llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

struct ChatOptions {
  // Used as the system message when the conversation does not start with one. Without it ChatML inserts
  // "You are a helpful assistant." and Llama-3 adds no system block.
  std::optional<std::string> system_prompt;
  bool add_generation_prompt = true;             // end with the assistant header
  std::string bos_token = "<|begin_of_text|>";  // Llama-3 only
};

// chatml when the tokenizer knows <|im_start|>, llama3 when it knows <|start_header_id|>; throws otherwise.
ChatFormat detect_chat_format(const Tokenizer& tokenizer);

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options = {});

// The rendered text and which of its bytes the template wrote (its markers, the BOS, the default system prompt), as
// byte ranges [first, second): the rest is the messages' roles and content, whose special tokens are plain text.
struct RenderedChat {
  std::string text;
  Tokenizer::TextSpans template_spans;
};
RenderedChat render_chat_spans(ChatFormat format, const std::vector<ChatMessage>& messages,
                               const ChatOptions& options = {});

}  // namespace crucible::lm

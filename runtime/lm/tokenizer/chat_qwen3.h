#pragma once
// Qwen3's chat template (the one its tokenizer_config.json ships), for conversations without tools: ChatML with no
// default system prompt; an assistant turn after the last user query shows its thinking in a <think> block (the last
// turn always, with an empty block when it has none), earlier turns their answer only; enable_thinking = false opens
// the reply with an empty <think> block so the model answers at once. A tool message is wrapped in <tool_response> in
// a user turn; other roles (such as developer) are left out, as the template leaves them.
#include <vector>

#include "lm/tokenizer/chat_message.h"

namespace crucible::lm {

RenderedChat render_qwen3(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace crucible::lm

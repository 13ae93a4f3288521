#pragma once
// gpt-oss's harmony chat format, rendered as openai's harmony renderer does for a conversation without tools.
//
// <|start|>system<|message|>{identity, knowledge cutoff, [current date,] reasoning effort, valid channels}<|end|>
// <|start|>developer<|message|># Instructions\n\n{system prompt}<|end|>        (each system or developer message)
// <|start|>user<|message|>{content}<|end|>
// <|start|>assistant<|channel|>final<|message|>{content}<|end|>              (earlier turns: the final message only)
// <|start|>assistant                                                        (the generation prompt)
// Without a generation prompt, a closing assistant turn is a completed reply, as training sees it: its reasoning in
// the analysis channel, then its final message ending with <|return|>.
#include <vector>

#include "lm/tokenizer/chat_message.h"

namespace crucible::lm {

RenderedChat render_harmony(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace crucible::lm

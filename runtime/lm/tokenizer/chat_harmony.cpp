#include "lm/tokenizer/chat_harmony.h"

#include "lm/tokenizer/chat_writer.h"

namespace crucible::lm {
namespace {

// The system message gpt-oss was trained with: identity and cutoff fixed, the date optional (a prompt that changes
// every day would change every cached prompt and every comparison between runs).
void write_system(ChatWriter& w, const ChatOptions& options) {
  w.markup("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
           "Knowledge cutoff: 2024-06\n");
  if (!options.current_date.empty()) {
    w.markup("Current date: ");
    w.message(options.current_date);
    w.markup("\n");
  }
  w.markup("\nReasoning: " + std::string(reasoning_effort_name(options.reasoning_effort)) +
           "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>");
}

void write_assistant_message(ChatWriter& w, const char* channel, const std::string& content, const char* end) {
  w.markup(std::string("<|start|>assistant<|channel|>") + channel + "<|message|>");
  w.message(content);
  w.markup(end);
}

}  // namespace

RenderedChat render_harmony(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  ChatWriter w;
  write_system(w, options);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool completed_reply = i + 1 == messages.size() && !options.add_generation_prompt;
    if (m.role == "system" || m.role == "developer") {
      w.markup("<|start|>developer<|message|># Instructions\n\n");
      w.message(m.content);
      w.markup("<|end|>");
    } else if (m.role == "assistant" && completed_reply) {
      if (!m.reasoning.empty()) write_assistant_message(w, "analysis", m.reasoning, "<|end|>");
      write_assistant_message(w, "final", m.content, "<|return|>");
    } else if (m.role == "assistant") {
      write_assistant_message(w, "final", m.content, "<|end|>");  // earlier turns drop their analysis
    } else {
      w.markup("<|start|>");
      w.message(m.role);
      w.markup("<|message|>");
      w.message(m.content);
      w.markup("<|end|>");
    }
  }
  if (options.add_generation_prompt) w.markup("<|start|>assistant");
  return w.finish();
}

}  // namespace crucible::lm

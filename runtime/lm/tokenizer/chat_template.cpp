#include "lm/tokenizer/chat_template.h"

#include <stdexcept>

#include "lm/tokenizer/chat_harmony.h"
#include "lm/tokenizer/chat_qwen3.h"
#include "lm/tokenizer/chat_writer.h"
#include "lm/tokenizer/unicode_properties.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

constexpr const char* chatml_default_system = "You are a helpful assistant.";

// Jinja's trim is Python's str.strip(), whose whitespace is White_Space plus U+001C..U+001F.
bool is_python_space(char32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string trim_like_jinja(const std::string& text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    const Utf8Step step = read_utf8(text, begin);
    if (!step.valid || !is_python_space(step.code_point)) break;
    begin += step.length;
  }
  // Backwards over what the leading trim kept, so no character read here reaches before `begin`.
  std::string_view kept = std::string_view(text).substr(begin);
  while (!kept.empty()) {
    const Utf8Step step = read_utf8_before(kept, kept.size());
    if (!step.valid || !is_python_space(step.code_point)) break;
    kept.remove_suffix(step.length);
  }
  return std::string(kept);
}

std::vector<ChatMessage> with_system_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  if (!options.system_prompt || (!messages.empty() && messages.front().role == "system")) return messages;
  std::vector<ChatMessage> out{{"system", *options.system_prompt}};
  out.insert(out.end(), messages.begin(), messages.end());
  return out;
}

RenderedChat render_chatml(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  ChatWriter w;
  if (!messages.empty() && messages.front().role != "system")
    w.markup(std::string("<|im_start|>system\n") + chatml_default_system + "<|im_end|>\n");
  for (const ChatMessage& message : messages) {
    w.markup("<|im_start|>");
    w.message(message.role);
    w.markup("\n");
    w.message(message.content);
    w.markup("<|im_end|>\n");
  }
  if (options.add_generation_prompt) w.markup("<|im_start|>assistant\n");
  return w.finish();
}

RenderedChat render_llama3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  ChatWriter w;
  w.markup(options.bos_token);
  for (const ChatMessage& message : messages) {
    w.markup("<|start_header_id|>");
    w.message(message.role);
    w.markup("<|end_header_id|>\n\n");
    w.message(trim_like_jinja(message.content));
    w.markup("<|eot_id|>");
  }
  if (options.add_generation_prompt) w.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return w.finish();
}

}  // namespace

std::string_view reasoning_effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::low: return "low";
    case ReasoningEffort::medium: return "medium";
    case ReasoningEffort::high: return "high";
  }
  throw std::logic_error("reasoning_effort_name: unknown effort");
}

std::optional<ReasoningEffort> parse_reasoning_effort(std::string_view name) {
  for (ReasoningEffort effort : {ReasoningEffort::low, ReasoningEffort::medium, ReasoningEffort::high})
    if (name == reasoning_effort_name(effort)) return effort;
  return std::nullopt;
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::qwen3: return "qwen3";
    case ChatFormat::harmony: return "harmony";
  }
  throw std::logic_error("chat_format_name: unknown format");
}

std::optional<ChatFormat> parse_chat_format(std::string_view name) {
  for (ChatFormat format : {ChatFormat::chatml, ChatFormat::llama3, ChatFormat::qwen3, ChatFormat::harmony})
    if (name == chat_format_name(format)) return format;
  return std::nullopt;
}

ChatFormat detect_chat_format(const Tokenizer& tokenizer) {
  if (tokenizer.token_to_id("<|start|>") && tokenizer.token_to_id("<|channel|>") && tokenizer.token_to_id("<|message|>"))
    return ChatFormat::harmony;
  if (tokenizer.token_to_id("<|im_start|>")) return ChatFormat::chatml;
  if (tokenizer.token_to_id("<|start_header_id|>")) return ChatFormat::llama3;
  throw std::runtime_error("chat template: the tokenizer has neither <|im_start|> (ChatML), <|start_header_id|> "
                           "(Llama-3) nor <|start|><|channel|><|message|> (harmony); no known chat format");
}

ChatFormat chat_format_for_model(const std::string& model_type, const Tokenizer& tokenizer) {
  if (model_type == "gpt_oss") return ChatFormat::harmony;
  if (model_type == "qwen3") return ChatFormat::qwen3;
  return detect_chat_format(tokenizer);
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  return render_chat_spans(format, messages, options).text;
}

RenderedChat render_chat_spans(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const std::vector<ChatMessage> conversation = with_system_prompt(messages, options);
  switch (format) {
    case ChatFormat::chatml: return render_chatml(conversation, options);
    case ChatFormat::llama3: return render_llama3(conversation, options);
    case ChatFormat::qwen3: return render_qwen3(conversation, options);
    case ChatFormat::harmony: return render_harmony(conversation, options);
  }
  throw std::logic_error("render_chat: unknown chat format");
}

}  // namespace crucible::lm

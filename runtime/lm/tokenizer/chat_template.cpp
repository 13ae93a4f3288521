#include "lm/tokenizer/chat_template.h"

#include <stdexcept>

#include "lm/tokenizer/unicode_properties.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

constexpr const char* chatml_default_system = "You are a helpful assistant.";

// Jinja's trim is Python's str.strip(), whose whitespace is White_Space plus U+001C..U+001F.
bool is_python_space(char32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string trim_like_jinja(const std::string& text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end) {
    const Utf8Step step = read_utf8(text, begin);
    if (!step.valid || !is_python_space(step.code_point)) break;
    begin += step.length;
  }
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    const Utf8Step step = read_utf8(text, start);
    if (!step.valid || start + step.length != end || !is_python_space(step.code_point)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::vector<ChatMessage> with_system_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  if (!options.system_prompt || (!messages.empty() && messages.front().role == "system")) return messages;
  std::vector<ChatMessage> out{{"system", *options.system_prompt}};
  out.insert(out.end(), messages.begin(), messages.end());
  return out;
}

// Appends the template's own text (recorded as a span) or a message's text (not recorded).
struct ChatWriter {
  RenderedChat out;
  void markup(const std::string& text) {
    if (text.empty()) return;
    auto& spans = out.template_spans;
    if (!spans.empty() && spans.back().second == out.text.size()) spans.back().second += text.size();
    else spans.emplace_back(out.text.size(), out.text.size() + text.size());
    out.text += text;
  }
  void message(const std::string& text) { out.text += text; }
};

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
  return std::move(w.out);
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
  return std::move(w.out);
}

}  // namespace

ChatFormat detect_chat_format(const Tokenizer& tokenizer) {
  if (tokenizer.token_to_id("<|im_start|>")) return ChatFormat::chatml;
  if (tokenizer.token_to_id("<|start_header_id|>")) return ChatFormat::llama3;
  throw std::runtime_error("chat template: the tokenizer has neither <|im_start|> (ChatML) nor "
                           "<|start_header_id|> (Llama-3); no known chat format");
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  return render_chat_spans(format, messages, options).text;
}

RenderedChat render_chat_spans(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const std::vector<ChatMessage> conversation = with_system_prompt(messages, options);
  switch (format) {
    case ChatFormat::chatml: return render_chatml(conversation, options);
    case ChatFormat::llama3: return render_llama3(conversation, options);
  }
  throw std::logic_error("render_chat: unknown chat format");
}

}  // namespace crucible::lm

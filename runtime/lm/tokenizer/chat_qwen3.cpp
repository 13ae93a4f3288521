#include "lm/tokenizer/chat_qwen3.h"

#include "lm/tokenizer/chat_writer.h"

namespace crucible::lm {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// Python's str.lstrip('\n') / rstrip('\n').
std::string lstrip_newlines(const std::string& s) { return s.substr(std::min(s.find_first_not_of('\n'), s.size())); }
std::string rstrip_newlines(const std::string& s) {
  const auto last = s.find_last_not_of('\n');
  return last == std::string::npos ? std::string() : s.substr(0, last + 1);
}

// The template's last "real" user query: a user message that is not only a tool response. Thinking is shown only
// after it.
std::size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>")))
      return i;
  }
  return messages.empty() ? 0 : messages.size() - 1;
}

struct Reply {
  std::string answer;
  std::string thinking;
};

// Without separate reasoning, a <think> block written in the content is split off as the template does.
Reply split_reply(const ChatMessage& m) {
  if (!m.reasoning.empty()) return {m.content, m.reasoning};
  const auto close = m.content.rfind("</think>");
  if (close == std::string::npos) return {m.content, ""};
  Reply r;
  r.answer = lstrip_newlines(m.content.substr(close + 8));
  std::string before = rstrip_newlines(m.content.substr(0, m.content.find("</think>")));
  const auto open = before.rfind("<think>");
  r.thinking = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
  return r;
}

void write_assistant(ChatWriter& w, const ChatMessage& m, bool show_thinking, bool last) {
  const Reply reply = split_reply(m);
  w.markup("<|im_start|>");
  w.message(m.role);
  if (show_thinking && (last || !reply.thinking.empty())) {
    w.markup("\n<think>\n");
    w.message(lstrip_newlines(rstrip_newlines(reply.thinking)));
    w.markup("\n</think>\n\n");
    w.message(lstrip_newlines(reply.answer));
  } else {
    w.markup("\n");
    w.message(reply.answer);
  }
  w.markup("<|im_end|>\n");
}

void write_turn(ChatWriter& w, const ChatMessage& m) {
  w.markup("<|im_start|>");
  w.message(m.role);
  w.markup("\n");
  w.message(m.content);
  w.markup("<|im_end|>\n");
}

void write_tool(ChatWriter& w, const std::vector<ChatMessage>& messages, std::size_t i) {
  if (i == 0 || messages[i - 1].role != "tool") w.markup("<|im_start|>user");
  w.markup("\n<tool_response>\n");
  w.message(messages[i].content);
  w.markup("\n</tool_response>");
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") w.markup("<|im_end|>\n");
}

}  // namespace

RenderedChat render_qwen3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  ChatWriter w;
  const std::size_t last_query = last_query_index(messages);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || m.role == "system") write_turn(w, m);
    else if (m.role == "assistant") write_assistant(w, m, i > last_query, i + 1 == messages.size());
    else if (m.role == "tool") write_tool(w, messages, i);
  }
  if (options.add_generation_prompt) {
    w.markup("<|im_start|>assistant\n");
    if (!options.enable_thinking) w.markup("<think>\n\n</think>\n\n");
  }
  return w.finish();
}

}  // namespace crucible::lm

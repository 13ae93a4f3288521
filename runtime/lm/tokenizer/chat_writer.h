#pragma once
// Builds a RenderedChat: the template's own text is recorded as a span, a message's text is not.
#include <string>
#include <utility>

#include "lm/tokenizer/chat_message.h"

namespace crucible::lm {

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
  RenderedChat finish() { return std::move(out); }
};

}  // namespace crucible::lm

#include "lm/tokenizer/harmony_reply.h"

#include <algorithm>
#include <stdexcept>

namespace crucible::lm {
namespace {

struct Markers {
  TokenId start, end, message, channel, constrain, return_, call;
};

Markers markers_of(const Tokenizer& tokenizer) {
  auto id = [&tokenizer](const char* token) {
    const auto found = tokenizer.token_to_id(token);
    if (!found) throw std::invalid_argument(std::string("harmony: the tokenizer has no ") + token + " token");
    return *found;
  };
  return {id("<|start|>"), id("<|end|>"),       id("<|message|>"), id("<|channel|>"),
          id("<|constrain|>"), id("<|return|>"), id("<|call|>")};
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!word.empty()) words.push_back(word), word.clear();
    } else {
      word += c;
    }
  }
  return words;
}

// The header between <|start|> (or the reply's start) and <|message|>: "{role}[ to=R]<|channel|>{channel}[ to=R]
// [<|constrain|>{type}]". The first message has no role part: the prompt's "<|start|>assistant" gave its role.
void read_header(const std::vector<TokenId>& header, const Markers& m, const Tokenizer& tokenizer, bool named_role,
                 HarmonyMessage& out) {
  const auto channel_at = std::find(header.begin(), header.end(), m.channel);
  const auto channel_end = std::find(channel_at, header.end(), m.constrain);
  std::vector<std::string> words = words_of(tokenizer.decode({header.begin(), channel_at}));
  if (named_role) out.role = !words.empty() && words.front().rfind("to=", 0) != 0 ? words.front() : "";
  if (channel_at != header.end()) {
    const auto channel_words = words_of(tokenizer.decode({channel_at + 1, channel_end}));
    if (!channel_words.empty()) out.channel = channel_words.front();
    words.insert(words.end(), channel_words.begin(), channel_words.end());
  }
  for (const std::string& word : words)
    if (word.rfind("to=", 0) == 0) out.recipient = word.substr(3);
}

// Splits the reply into messages at its markers.
class ReplyReader {
 public:
  explicit ReplyReader(const Tokenizer& tokenizer) : tokenizer_(tokenizer), m_(markers_of(tokenizer)) {}

  // Returns false once the reply is over: <|return|> and <|call|> end sampling, so later tokens are not the reply.
  bool read(TokenId id) {
    if (id == m_.start) {
      if (open_) close(HarmonyMessage::End::cut_off);  // a new message although the last one never ended
      open_ = true;
      named_role_ = true;
    } else if (id == m_.end || id == m_.return_ || id == m_.call) {
      close(id == m_.end ? HarmonyMessage::End::end
                         : id == m_.return_ ? HarmonyMessage::End::return_ : HarmonyMessage::End::call);
      return id == m_.end;
    } else if (id == m_.message && in_header_) {
      in_header_ = false;
      open_ = true;
    } else if (open_ || messages_.empty()) {  // after an <|end|>, only a <|start|> opens the next message
      open_ = true;
      (in_header_ ? header_ : content_).push_back(id);
    }
    return true;
  }

  std::vector<HarmonyMessage> finish() {
    if (open_) close(HarmonyMessage::End::cut_off);
    return std::move(messages_);
  }

 private:
  void close(HarmonyMessage::End end) {
    HarmonyMessage message;
    read_header(header_, m_, tokenizer_, named_role_, message);
    message.content = tokenizer_.decode(content_);
    message.end = end;
    messages_.push_back(std::move(message));
    header_.clear();
    content_.clear();
    open_ = false;
    in_header_ = true;
    named_role_ = false;
  }

  const Tokenizer& tokenizer_;
  Markers m_;
  std::vector<HarmonyMessage> messages_;
  std::vector<TokenId> header_, content_;
  bool open_ = false;
  bool in_header_ = true;
  bool named_role_ = false;
};

std::string channels_seen(const std::vector<HarmonyMessage>& messages) {
  std::string out;
  for (const HarmonyMessage& m : messages) {
    const std::string name = m.channel.empty() ? "none" : m.channel;
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

// Why a reply has no final message, in words a run's parse_error can carry.
std::string missing_final_reason(const HarmonyReply& reply) {
  if (reply.messages.empty()) return "the reply is empty: no harmony message";
  const HarmonyMessage& last = reply.messages.back();
  if (last.end == HarmonyMessage::End::call)
    return "the reply calls a tool (" + (last.recipient.empty() ? std::string("no recipient") : "to=" + last.recipient) +
           ") instead of answering in the final channel";
  if (reply.cut_off)
    return "the reply was cut off before a final message (it stopped in the " +
           (last.channel.empty() ? std::string("unnamed") : last.channel) + " channel)";
  return "the reply has no message in the final channel (channels: " + channels_seen(reply.messages) + ")";
}

}  // namespace

HarmonyReply parse_harmony_reply(const std::vector<TokenId>& tokens, const Tokenizer& tokenizer) {
  ReplyReader reader(tokenizer);
  bool over = false;
  for (TokenId id : tokens)
    if (!reader.read(id)) {
      over = true;
      break;
    }
  HarmonyReply reply;
  reply.messages = reader.finish();
  reply.cut_off = !over;
  for (const HarmonyMessage& m : reply.messages)
    if (m.role == "assistant" && m.channel == "final" && m.recipient.empty()) reply.final_text = m.content;
  if (!reply.final_text) reply.error = missing_final_reason(reply);
  return reply;
}

}  // namespace crucible::lm

#include "config/toml_nesting.h"

#include <vector>

namespace crucible::config {
namespace {

// One pass over the text. Depth: a header [a.b] puts its keys at 2; a key c.d in it puts its value at 4; an array
// or inline table adds one for what it holds. Malformed text is scanned on as well as it goes: the parser, which
// runs only when no depth is exceeded, reports it.
class NestingScan {
 public:
  NestingScan(std::string_view text, int max_depth) : text_(text), max_(max_depth) {}

  std::optional<int64_t> run() {
    while (pos_ < text_.size() && !too_deep_) step();
    if (too_deep_) return line_;
    return std::nullopt;
  }

 private:
  struct Open {
    char bracket;  // '[' an array, '{' an inline table
    int depth;     // the depth of the array or table itself
  };

  char at(std::size_t i) const { return i < text_.size() ? text_[i] : '\0'; }

  void check(int depth) {
    if (depth > max_) too_deep_ = true;
  }

  void step() {
    const char c = text_[pos_];
    if (c == '\n') return newline();
    if (c == ' ' || c == '\t' || c == '\r') return void(++pos_);
    if (c == '#') return skip_comment();
    if (expect_key_ && open_.empty() && c == '[') return header();
    if (expect_key_ && c != '}') return key();
    value(c);
  }

  void newline() {
    ++line_;
    ++pos_;
    if (open_.empty()) expect_key_ = true;  // a top-level value ends with its line
  }

  void skip_comment() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }

  // [a.b.c] or [[a.b.c]]: its keys sit one level below its last part (two for an array of tables).
  void header() {
    const bool array_of_tables = at(pos_ + 1) == '[';
    pos_ += array_of_tables ? 2 : 1;
    int dots = 0;
    while (pos_ < text_.size() && text_[pos_] != ']' && text_[pos_] != '\n') {
      if (text_[pos_] == '"' || text_[pos_] == '\'') skip_string();
      else dots += text_[pos_++] == '.';
    }
    while (at(pos_) == ']') ++pos_;
    table_depth_ = dots + 1 + (array_of_tables ? 1 : 0);
    check(table_depth_);
  }

  // a.b.c = : the value sits one level below the key's last part.
  void key() {
    int dots = 0;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '=' || c == '\n' || c == '#' || c == '}' || c == ',') break;
      if (c == '"' || c == '\'') skip_string();
      else dots += text_[pos_++] == '.';
    }
    if (at(pos_) == '=') ++pos_;
    value_depth_ = (open_.empty() ? table_depth_ : open_.back().depth) + dots + 1;
    check(value_depth_);
    expect_key_ = false;
  }

  void value(char c) {
    if (c == '"' || c == '\'') return skip_string();
    if (c == '[' || c == '{') return open(c);
    if (c == ']' || c == '}') return close();
    if (c == ',' && !open_.empty() && open_.back().bracket == '{') expect_key_ = true;
    ++pos_;
  }

  void open(char bracket) {
    ++pos_;
    open_.push_back({bracket, value_depth_});
    check(value_depth_);
    if (bracket == '{') expect_key_ = true;
    else value_depth_ = open_.back().depth + 1;
  }

  void close() {
    ++pos_;
    if (!open_.empty()) open_.pop_back();
    if (!open_.empty() && open_.back().bracket == '[') value_depth_ = open_.back().depth + 1;
    expect_key_ = false;
  }

  // "basic", 'literal', """multi-line basic""" or '''multi-line literal''': nothing inside counts.
  void skip_string() {
    const char quote = text_[pos_];
    if (at(pos_ + 1) == quote && at(pos_ + 2) == quote) return skip_multiline_string(quote);
    ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote && text_[pos_] != '\n') {
      if (quote == '"' && text_[pos_] == '\\' && at(pos_ + 1) != '\n') ++pos_;
      ++pos_;
    }
    if (at(pos_) == quote) ++pos_;
  }

  void skip_multiline_string(char quote) {
    pos_ += 3;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == quote && at(pos_ + 1) == quote && at(pos_ + 2) == quote) {
        pos_ += 3;
        // Up to two more quotes belong to the content: """a""""" is a"" .
        for (int extra = 0; extra < 2 && at(pos_) == quote; ++extra) ++pos_;
        return;
      }
      if (c == '\n') ++line_;
      if (quote == '"' && c == '\\' && pos_ + 1 < text_.size()) {
        if (text_[pos_ + 1] == '\n') ++line_;
        ++pos_;
      }
      ++pos_;
    }
  }

  std::string_view text_;
  int max_;
  std::size_t pos_ = 0;
  int64_t line_ = 1;
  bool expect_key_ = true;
  bool too_deep_ = false;
  int table_depth_ = 0;
  int value_depth_ = 1;
  std::vector<Open> open_;
};

}  // namespace

std::optional<int64_t> line_nested_deeper_than(std::string_view text, int max_depth) {
  return NestingScan(text, max_depth).run();
}

}  // namespace crucible::config

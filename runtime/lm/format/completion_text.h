#pragma once
// The text of one completion as tokens arrive: raw bytes (byte-level tokens may split a UTF-8 character),
// stop-string detection across token boundaries, and the final text with invalid UTF-8 replaced by U+FFFD.
#include <optional>
#include <string>
#include <vector>

namespace crucible::lm {

class CompletionText {
 public:
  explicit CompletionText(std::vector<std::string> stop_strings = {});
  // Appends a token's bytes; returns true when a stop string now appears (the text is cut before it).
  bool append(const std::string& token_bytes);
  bool stopped() const { return stop_at_.has_value(); }
  std::string text() const;  // valid UTF-8

 private:
  std::vector<std::string> stop_strings_;
  std::size_t longest_stop_ = 0;
  std::string bytes_;
  std::optional<std::size_t> stop_at_;
};

}  // namespace crucible::lm

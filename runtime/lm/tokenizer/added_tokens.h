#pragma once
// Added tokens (tokenizer.json "added_tokens"): found in the text before pre-tokenization so each becomes
// one id. Matching is leftmost, then longest.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/token_id.h"

namespace crucible::lm {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;     // skipped by decode(skip_special_tokens); text, not a token, when parse_special is off
  bool lstrip = false;      // the match swallows the whitespace before it
  bool rstrip = false;      // the match swallows the whitespace after it
  bool normalized = false;  // matched on normalized text (its content normalized too)
};

// A byte range of the text: an added token's match, or plain text when token < 0.
struct TextSegment {
  std::size_t begin = 0;
  std::size_t end = 0;
  TokenId token = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text that `tokens[i]` matches (its content, normalized where that applies).
  AddedTokenMatcher(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);

  // Covers `text` with segments in order. With parse_special off, special tokens are left in the text
  // (and, as in the reference, their span is not searched again for other tokens). A token with rstrip
  // may reach over a following match; the segments then overlap, again as in the reference.
  std::vector<TextSegment> split(std::string_view text, bool parse_special) const;
  // The same, special tokens being tokens only where `special_allowed(begin, end)` holds for their match.
  using SpecialAllowed = std::function<bool(std::size_t begin, std::size_t end)>;
  std::vector<TextSegment> split(std::string_view text, const SpecialAllowed& special_allowed) const;

  bool empty() const { return tokens_.empty(); }

 private:
  struct Match {
    std::size_t begin;
    std::size_t end;
    std::size_t token_index;
  };
  struct TrieNode {
    std::vector<std::pair<unsigned char, int>> children;  // sorted by byte
    int token_index = -1;
  };
  int child(int node, unsigned char byte) const;
  bool longest_match_at(std::string_view text, std::size_t pos, Match& match) const;

  std::vector<AddedToken> tokens_;
  std::vector<TrieNode> nodes_;
  bool first_bytes_[256] = {};
};

}  // namespace crucible::lm

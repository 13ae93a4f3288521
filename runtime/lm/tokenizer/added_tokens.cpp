#include "lm/tokenizer/added_tokens.h"

#include <algorithm>

#include "lm/tokenizer/unicode_properties.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

// Start of the whitespace that ends text[0, end).
std::size_t start_of_trailing_white_space(std::string_view text, std::size_t end) {
  while (end > 0) {
    const Utf8Step step = read_utf8_before(text, end);
    if (!step.valid || !is_white_space(step.code_point)) break;
    end -= step.length;
  }
  return end;
}

// End of the whitespace that starts at text[begin].
std::size_t end_of_leading_white_space(std::string_view text, std::size_t begin) {
  while (begin < text.size()) {
    const Utf8Step step = read_utf8(text, begin);
    if (!step.valid || !is_white_space(step.code_point)) break;
    begin += step.length;
  }
  return begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns)
    : tokens_(std::move(tokens)), nodes_(1) {
  for (std::size_t index = 0; index < patterns.size(); ++index) {
    const std::string& pattern = patterns[index];
    if (pattern.empty()) continue;
    first_bytes_[static_cast<unsigned char>(pattern[0])] = true;
    int node = 0;
    for (char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      int next = child(node, byte);
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::pair{byte, 0}), {byte, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    // The first token with a given text wins.
    if (nodes_[node].token_index < 0) nodes_[node].token_index = static_cast<int>(index);
  }
}

int AddedTokenMatcher::child(int node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::pair{byte, 0});
  return it != children.end() && it->first == byte ? it->second : -1;
}

bool AddedTokenMatcher::longest_match_at(std::string_view text, std::size_t pos, Match& match) const {
  if (!first_bytes_[static_cast<unsigned char>(text[pos])]) return false;
  bool found = false;
  int node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token_index >= 0) {
      match = {pos, i + 1, static_cast<std::size_t>(nodes_[node].token_index)};
      found = true;
    }
  }
  return found;
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  return split(text, [parse_special](std::size_t, std::size_t) { return parse_special; });
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text, const SpecialAllowed& special_allowed) const {
  std::vector<TextSegment> segments;
  std::size_t covered = 0;  // end of the last segment
  for (std::size_t pos = 0; pos < text.size() && !tokens_.empty();) {
    Match match{};
    if (!longest_match_at(text, pos, match)) {
      ++pos;
      continue;
    }
    pos = match.end;
    const AddedToken& token = tokens_[match.token_index];
    if (token.special && !special_allowed(match.begin, match.end)) continue;
    std::size_t begin = match.begin, end = match.end;
    if (token.lstrip) begin = std::max(start_of_trailing_white_space(text, begin), covered);
    if (token.rstrip) end = end_of_leading_white_space(text, end);
    if (covered < begin) segments.push_back({covered, begin, -1});
    segments.push_back({begin, end, token.id});
    covered = end;
  }
  if (covered < text.size()) segments.push_back({covered, text.size(), -1});
  return segments;
}

}  // namespace crucible::lm

#pragma once
// Byte-level BPE: a pre-token's bytes start as one symbol each and merge by rank, lowest first.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lm/tokenizer/token_id.h"

namespace crucible::lm {

struct BpeModelSpec {
  std::unordered_map<std::string, TokenId> vocab;           // byte-level token -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;  // a pre-token that is a whole vocabulary entry maps to it directly
};

class BpeModel {
 public:
  // Throws std::runtime_error when a merge names a token missing from the vocabulary.
  explicit BpeModel(BpeModelSpec spec);

  // Appends the ids of one pre-token given as raw bytes. Bytes whose character is missing from the
  // vocabulary are dropped, as the reference does when there is no unknown token.
  void tokenize(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  const std::string* id_to_token(TokenId id) const;
  TokenId max_id() const { return static_cast<TokenId>(tokens_by_id_.size()) - 1; }

 private:
  struct Merge {
    std::uint32_t rank;
    TokenId merged;
  };
  static std::uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  const Merge* find_merge(TokenId left, TokenId right) const;

  std::unordered_map<std::string, TokenId> vocab_;
  std::vector<std::optional<std::string>> tokens_by_id_;
  std::unordered_map<std::string, TokenId> vocab_by_bytes_;  // for ignore_merges: keyed by raw bytes
  std::array<TokenId, 256> byte_ids_{};                      // -1 when the byte has no entry
  std::unordered_map<std::uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
};

}  // namespace crucible::lm

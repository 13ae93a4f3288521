#pragma once
// A Hugging Face tokenizer.json tokenizer (byte-level BPE) that gives the same ids and text as the
// `tokenizers` library: added tokens, NFC, the Qwen2 / Llama-3 / GPT-2 pre-tokenizers, BPE, post-processing.
// Thread-safe: every method is const; the per-word cache locks internally. Copies share the cache.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lm/tokenizer/added_tokens.h"
#include "lm/tokenizer/bpe_model.h"
#include "lm/tokenizer/pre_tokenizer.h"
#include "lm/tokenizer/token_id.h"
#include "lm/tokenizer/tokenizer_spec.h"
#include "lm/tokenizer/word_cache.h"

namespace crucible::lm {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory that holds one. Throws std::runtime_error.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json_text);
  explicit Tokenizer(TokenizerSpec spec);

  // add_special_tokens applies the post-processor's template (e.g. Llama-3's <|begin_of_text|>).
  // parse_special=false treats special tokens written in the text as plain text (for untrusted text);
  // non-special added tokens are still recognised. Throws std::invalid_argument for invalid UTF-8.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true, bool parse_special = true) const;
  // Special tokens parsed only inside `special_spans` (byte ranges [first, second) of `text`, such as a chat
  // template's own text), plain text elsewhere (messages' content): the same ids as encode() where no special token
  // is written outside the spans.
  using TextSpans = std::vector<std::pair<std::size_t, std::size_t>>;
  std::vector<TokenId> encode(std::string_view text, const TextSpans& special_spans, bool add_special_tokens) const;

  // Text of the ids; bytes that are not valid UTF-8 become U+FFFD. Unknown ids are skipped.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special_tokens = false) const;
  // The raw bytes of the ids (may end inside a UTF-8 sequence), for streaming and stop strings.
  std::string decode_bytes(const std::vector<TokenId>& ids, bool skip_special_tokens = false) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(TokenId id) const;
  // Largest id of the vocabulary and the added tokens, plus one.
  std::size_t vocab_size() const;
  bool is_special(TokenId id) const;
  const std::vector<TokenId>& special_ids() const { return special_ids_; }

  // The normalized pre-tokens of `text` (no added-token matching), as raw text.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

 private:
  const std::string* token_text(TokenId id) const;
  void encode_plain(std::string_view text, bool parse_special, std::vector<TokenId>& ids) const;
  void encode_normalized(std::string_view text, std::vector<TokenId>& ids) const;

  BpeModel model_;
  bool nfc_ = false;
  PreTokenizer pre_tokenizer_;
  std::vector<TokenId> template_prefix_;
  std::vector<TokenId> template_suffix_;
  std::unordered_map<std::string, TokenId> added_ids_;
  std::unordered_map<TokenId, std::string> added_contents_;
  std::unordered_set<std::string> special_contents_;
  std::vector<TokenId> special_ids_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false, on the input text
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized=true, on normalized text
  std::shared_ptr<WordCache> cache_;
};

}  // namespace crucible::lm

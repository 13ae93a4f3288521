#pragma once
// Everything a supported tokenizer.json describes, checked and in plain types.
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/added_tokens.h"
#include "lm/tokenizer/bpe_model.h"
#include "lm/tokenizer/pre_tokenizer.h"
#include "lm/tokenizer/token_id.h"

namespace crucible::lm {

struct TokenizerSpec {
  BpeModelSpec model;
  std::vector<AddedToken> added_tokens;
  bool nfc = false;  // normalizer NFC (or a Sequence of NFC); otherwise none
  PreTokenizer pre_tokenizer;
  // The post-processor's single-sequence template with add_special_tokens: ids around the text's ids.
  std::vector<TokenId> template_prefix;
  std::vector<TokenId> template_suffix;
};

// Parses and checks tokenizer.json text. Throws std::runtime_error ("tokenizer.json: ...") for malformed
// JSON and for anything this tokenizer does not reproduce exactly.
TokenizerSpec parse_tokenizer_json(std::string_view json_text);

}  // namespace crucible::lm

#include "lm/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "lm/tokenizer/byte_level.h"
#include "lm/tokenizer/nfc.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer.json: cannot open " + path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

AddedTokenMatcher make_matcher(const std::vector<AddedToken>& tokens, bool normalized, bool nfc) {
  std::vector<AddedToken> selected;
  std::vector<std::string> patterns;
  for (const AddedToken& token : tokens) {
    if (token.normalized != normalized) continue;
    selected.push_back(token);
    patterns.push_back(normalized && nfc ? lm::nfc(token.content) : token.content);
  }
  return AddedTokenMatcher(std::move(selected), patterns);
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  return from_json(read_file(file));
}

Tokenizer Tokenizer::from_json(std::string_view json_text) { return Tokenizer(parse_tokenizer_json(json_text)); }

Tokenizer::Tokenizer(TokenizerSpec spec)
    : model_(std::move(spec.model)),
      nfc_(spec.nfc),
      pre_tokenizer_(std::move(spec.pre_tokenizer)),
      template_prefix_(std::move(spec.template_prefix)),
      template_suffix_(std::move(spec.template_suffix)),
      cache_(std::make_shared<WordCache>()) {
  for (const AddedToken& token : spec.added_tokens) {
    added_ids_.emplace(token.content, token.id);
    added_contents_.emplace(token.id, token.content);
    if (token.special) special_contents_.insert(token.content);
  }
  for (const auto& [id, content] : added_contents_)
    if (special_contents_.count(content) != 0) special_ids_.push_back(id);
  std::sort(special_ids_.begin(), special_ids_.end());
  raw_matcher_ = make_matcher(spec.added_tokens, false, nfc_);
  normalized_matcher_ = make_matcher(spec.added_tokens, true, nfc_);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  const TextSpans everywhere{{0, text.size()}};
  return encode(text, parse_special ? everywhere : TextSpans{}, add_special_tokens);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const TextSpans& special_spans,
                                       bool add_special_tokens) const {
  require_valid_utf8(text, "Tokenizer::encode");
  const auto within_spans = [&special_spans](std::size_t begin, std::size_t end) {
    return std::any_of(special_spans.begin(), special_spans.end(),
                       [&](const auto& span) { return span.first <= begin && end <= span.second; });
  };
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + template_prefix_.size() + template_suffix_.size());
  if (add_special_tokens) ids.insert(ids.end(), template_prefix_.begin(), template_prefix_.end());
  for (const TextSegment& segment : raw_matcher_.split(text, within_spans)) {
    if (segment.token >= 0)
      ids.push_back(segment.token);
    else
      encode_plain(text.substr(segment.begin, segment.end - segment.begin), within_spans(segment.begin, segment.end),
                   ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), template_suffix_.begin(), template_suffix_.end());
  return ids;
}

void Tokenizer::encode_plain(std::string_view text, bool parse_special, std::vector<TokenId>& ids) const {
  std::string normalized_storage;
  std::string_view normalized = text;
  if (nfc_) {
    normalized_storage = nfc(text);
    normalized = normalized_storage;
  }
  for (const TextSegment& segment : normalized_matcher_.split(normalized, parse_special)) {
    if (segment.token >= 0)
      ids.push_back(segment.token);
    else
      encode_normalized(normalized.substr(segment.begin, segment.end - segment.begin), ids);
  }
}

void Tokenizer::encode_normalized(std::string_view text, std::vector<TokenId>& ids) const {
  pre_tokenizer_.for_each_piece(text, [this, &ids](std::string_view piece) {
    if (cache_->append(piece, ids)) return;
    const std::size_t first = ids.size();
    model_.tokenize(piece, ids);
    cache_->insert(piece, ids.data() + first, ids.size() - first);
  });
}

const std::string* Tokenizer::token_text(TokenId id) const {
  const auto added = added_contents_.find(id);
  if (added != added_contents_.end()) return &added->second;
  return model_.id_to_token(id);
}

std::string Tokenizer::decode_bytes(const std::vector<TokenId>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    const std::string* token = token_text(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && special_contents_.count(*token) != 0) continue;
    // A token outside the byte alphabet (an added token such as "<|im start|>" with a space) is its own text.
    if (!append_byte_level_bytes(bytes, *token)) bytes += *token;
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special_tokens) const {
  return utf8_lossy(decode_bytes(ids, skip_special_tokens));
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  const auto added = added_ids_.find(std::string(token));
  if (added != added_ids_.end()) return added->second;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  const std::string* token = token_text(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

std::size_t Tokenizer::vocab_size() const {
  TokenId max_id = model_.max_id();
  for (const auto& [id, content] : added_contents_) max_id = std::max(max_id, id);
  return static_cast<std::size_t>(max_id + 1);
}

bool Tokenizer::is_special(TokenId id) const {
  const std::string* token = token_text(id);
  return token != nullptr && special_contents_.count(*token) != 0;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  require_valid_utf8(text, "Tokenizer::pre_tokenize");
  return pre_tokenizer_.pre_tokenize(nfc_ ? nfc(text) : std::string(text));
}

}  // namespace crucible::lm

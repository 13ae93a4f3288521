#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "lm/tokenizer/byte_level.h"
#include "lm/tokenizer/tokenizer_spec.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error("tokenizer.json: " + message); }

std::string type_of(const json& node, const std::string& where) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) fail(where + " has no \"type\"");
  return node["type"].get<std::string>();
}

bool flag(const json& node, const char* key, bool fallback) {
  if (!node.contains(key) || node[key].is_null()) return fallback;
  if (!node[key].is_boolean()) fail(std::string("\"") + key + "\" must be true or false");
  return node[key].get<bool>();
}

bool is_null_or_empty_string(const json& node, const char* key) {
  return !node.contains(key) || node[key].is_null() || (node[key].is_string() && node[key].get<std::string>().empty());
}

BpeModelSpec parse_model(const json& model) {
  if (!model.is_object()) fail("\"model\" is missing");
  // Older files leave out the type of a BPE model.
  const std::string type = model.contains("type") ? type_of(model, "model") : "BPE";
  if (type != "BPE") fail("unsupported model type " + type + " (only byte-level BPE is supported)");
  if (flag(model, "byte_fallback", false)) fail("BPE byte_fallback is not supported (only byte-level BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    fail("BPE dropout is not supported");
  if (!is_null_or_empty_string(model, "continuing_subword_prefix"))
    fail("BPE continuing_subword_prefix is not supported");
  if (!is_null_or_empty_string(model, "end_of_word_suffix")) fail("BPE end_of_word_suffix is not supported");

  BpeModelSpec spec;
  spec.ignore_merges = flag(model, "ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab must be an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) fail("model.vocab[\"" + token + "\"] is not an integer id");
    spec.vocab.emplace(token, id.get<TokenId>());
  }
  if (!model.contains("merges") || !model["merges"].is_array()) fail("model.merges must be an array");
  for (const json& merge : model["merges"]) {
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == text.size() ||
          text.find(' ', space + 1) != std::string::npos)
        fail("malformed merge \"" + text + "\" (expected \"left right\")");
      spec.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      fail("malformed merge " + merge.dump());
    }
  }
  return spec;
}

bool parse_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return false;
  const std::string type = type_of(normalizer, "normalizer");
  if (type == "NFC") return true;
  if (type == "Sequence") {
    bool nfc = false;
    for (const json& step : normalizer.value("normalizers", json::array())) nfc = parse_normalizer(step) || nfc;
    return nfc;
  }
  fail("unsupported normalizer " + type + " (supported: null, NFC, Sequence of NFC)");
}

SplitPattern parse_split(const json& split) {
  const json& pattern = split.value("pattern", json());
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
    fail("unsupported pre-tokenizer Split pattern: " + pattern.dump() + " (only Regex patterns are supported)");
  const SplitPattern recognised = split_pattern_from_regex(pattern["Regex"].get<std::string>());
  if (split.value("behavior", std::string()) != "Isolated")
    fail("unsupported pre-tokenizer Split behavior: " + split.value("behavior", json()).dump() +
         " (only Isolated is supported)");
  if (flag(split, "invert", false)) fail("pre-tokenizer Split with invert=true is not supported");
  return recognised;
}

ByteLevelOptions parse_byte_level(const json& byte_level) {
  return {flag(byte_level, "add_prefix_space", true), flag(byte_level, "use_regex", true)};
}

PreTokenizer parse_pre_tokenizer(const json& pre_tokenizer) {
  if (pre_tokenizer.is_null()) fail("a byte-level pre-tokenizer is required (pre_tokenizer is null)");
  const std::string type = type_of(pre_tokenizer, "pre_tokenizer");
  std::vector<json> steps;
  if (type == "Sequence")
    steps = pre_tokenizer.value("pretokenizers", std::vector<json>());
  else
    steps = {pre_tokenizer};
  PreTokenizer out;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string step_type = type_of(steps[i], "pre_tokenizer step");
    const bool last = i + 1 == steps.size();
    if (step_type == "Split" && !last) {
      out.splits.push_back(parse_split(steps[i]));
    } else if (step_type == "ByteLevel" && last) {
      out.byte_level = parse_byte_level(steps[i]);
      return out;
    } else {
      fail("unsupported pre-tokenizer " + step_type +
           " here (supported: Split steps with a known Regex followed by one ByteLevel)");
    }
  }
  fail("the pre-tokenizer must end with ByteLevel");
}

std::vector<TokenId> special_token_ids(const json& special_tokens, const std::string& name) {
  if (!special_tokens.is_object() || !special_tokens.contains(name))
    fail("TemplateProcessing names special token " + name + " but does not define it");
  const json& ids = special_tokens[name].value("ids", json());
  if (!ids.is_array()) fail("TemplateProcessing special token " + name + " has no ids");
  std::vector<TokenId> out;
  for (const json& id : ids) out.push_back(id.get<TokenId>());
  return out;
}

void parse_template(const json& processor, TokenizerSpec& spec) {
  const json& single = processor.value("single", json());
  if (!single.is_array()) fail("TemplateProcessing has no single template");
  bool seen_sequence = false;
  for (const json& piece : single) {
    if (piece.contains("Sequence")) {
      const std::string id = piece["Sequence"].value("id", std::string());
      if (id != "A" || seen_sequence) fail("TemplateProcessing single template must contain $A exactly once");
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].value("id", std::string());
      const auto ids = special_token_ids(processor.value("special_tokens", json()), name);
      auto& target = seen_sequence ? spec.template_suffix : spec.template_prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    } else {
      fail("malformed TemplateProcessing piece " + piece.dump());
    }
  }
  if (!seen_sequence) fail("TemplateProcessing single template must contain $A exactly once");
}

void parse_post_processor(const json& processor, TokenizerSpec& spec) {
  if (processor.is_null()) return;
  const std::string type = type_of(processor, "post_processor");
  if (type == "ByteLevel") return;  // changes offsets only
  if (type == "TemplateProcessing") {
    if (!spec.template_prefix.empty() || !spec.template_suffix.empty())
      fail("more than one TemplateProcessing post-processor");
    parse_template(processor, spec);
    return;
  }
  if (type == "Sequence") {
    for (const json& step : processor.value("processors", json::array())) parse_post_processor(step, spec);
    return;
  }
  fail("unsupported post_processor " + type + " (supported: null, ByteLevel, TemplateProcessing, Sequence)");
}

void check_decoder(const json& decoder) {
  if (decoder.is_null()) fail("decoder is null (only the ByteLevel decoder is supported)");
  const std::string type = type_of(decoder, "decoder");
  if (type != "ByteLevel") fail("unsupported decoder " + type + " (only ByteLevel is supported)");
}

std::vector<AddedToken> parse_added_tokens(const json& added) {
  std::vector<AddedToken> out;
  if (added.is_null()) return out;
  if (!added.is_array()) fail("added_tokens must be an array");
  for (const json& entry : added) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
        !entry.contains("content") || !entry["content"].is_string())
      fail("malformed added token " + entry.dump());
    AddedToken token;
    token.id = entry["id"].get<TokenId>();
    token.content = entry["content"].get<std::string>();
    if (token.id < 0) fail("added token " + token.content + " has a negative id");
    if (token.content.empty()) continue;  // the reference ignores empty added tokens
    token.special = flag(entry, "special", false);
    token.lstrip = flag(entry, "lstrip", false);
    token.rstrip = flag(entry, "rstrip", false);
    token.normalized = flag(entry, "normalized", !token.special);
    if (flag(entry, "single_word", false)) fail("added token " + token.content + ": single_word is not supported");
    out.push_back(std::move(token));
  }
  return out;
}

void check_unknown_token(const json& model, const BpeModelSpec& spec) {
  if (is_null_or_empty_string(model, "unk_token")) return;
  // With every byte in the vocabulary the unknown token can never be produced.
  for (unsigned byte = 0; byte < 256; ++byte) {
    std::string character;
    append_utf8(character, byte_to_unicode(static_cast<unsigned char>(byte)));
    if (spec.vocab.count(character) == 0)
      fail("BPE unk_token is only supported when the vocabulary covers all 256 bytes");
  }
}

}  // namespace

TokenizerSpec parse_tokenizer_json(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& error) {
    fail(std::string("invalid JSON: ") + error.what());
  }
  if (!root.is_object()) fail("the top level must be an object");
  try {
    for (const char* unsupported : {"truncation", "padding"})
      if (root.contains(unsupported) && !root[unsupported].is_null())
        fail(std::string(unsupported) + " is not supported (must be null)");
    TokenizerSpec spec;
    spec.model = parse_model(root.value("model", json()));
    check_unknown_token(root["model"], spec.model);
    spec.added_tokens = parse_added_tokens(root.value("added_tokens", json()));
    spec.nfc = parse_normalizer(root.value("normalizer", json()));
    spec.pre_tokenizer = parse_pre_tokenizer(root.value("pre_tokenizer", json()));
    parse_post_processor(root.value("post_processor", json()), spec);
    check_decoder(root.value("decoder", json()));
    return spec;
  } catch (const json::exception& error) {
    fail(std::string("unexpected structure: ") + error.what());
  }
}

}  // namespace crucible::lm

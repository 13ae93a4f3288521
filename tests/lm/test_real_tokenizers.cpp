// The real gpt-oss (o200k_harmony), Qwen3 and Llama 3.1 tokenizers through the project's tokenizer.json reader, and
// the o200k pre-tokenizer pattern. Token ids are checked against openai's published harmony example and, where the
// GPU node's script wrote them (CRUCIBLE_TOKENIZER_GOLDENS), against the Hugging Face tokenizers library.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lm/real_tokenizers.h"
#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/tokenizer/nfc.h"
#include "lm/tokenizer/split_pattern.h"

namespace {

using crucible::lm::SplitPattern;
using crucible::lm::Tokenizer;
using crucible::lm::TokenId;
using crucible::test::real_tokenizer;
using crucible::test::real_tokenizer_missing;
using nlohmann::json;
using Ids = std::vector<TokenId>;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::vector<std::string> corpus() {
  return json::parse(read_file(std::string(CRUCIBLE_SOURCE_DIR) + "/tests/fixtures/lm/tokenizer_corpus.json"))
      .get<std::vector<std::string>>();
}

std::vector<std::string> o200k_split(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view piece : crucible::lm::split_with_pattern(text, SplitPattern::o200k)) out.emplace_back(piece);
  return out;
}

const Tokenizer* require_real(const std::string& name) {
  const Tokenizer* tokenizer = real_tokenizer(name);
  if (!tokenizer) MESSAGE(real_tokenizer_missing(name));
  return tokenizer;
}

}  // namespace

TEST_CASE("pre-tokenizer: hand-checked splits of the o200k pattern") {
  using V = std::vector<std::string>;
  // A word is an upper-case head and a lower-case tail: case changes start a new piece, capitals stay together.
  CHECK(o200k_split("HelloWorld camelCase HTTPServerError") == V{"Hello", "World", " camel", "Case", " HTTPServer", "Error"});
  // Contractions end a word, case-insensitively; a capital alone takes one too.
  CHECK(o200k_split("I'M don't YOU'RE") == V{"I'M", " don't", " YOU'RE"});
  // Digits in threes; '/' stays with the punctuation before a word, and newlines after punctuation join it.
  CHECK(o200k_split("12345 a/b/c x;\n\n/ y") == V{"123", "45", " a", "/b", "/c", " x", ";\n\n/", " y"});
  // Titlecase starts a word, Lo (CJK) counts as both head and tail, a mark may be the prefix or part of a word.
  CHECK(o200k_split("\xc7\x85" "ebug \xe4\xb8\xad\xe6\x96\x87 \xcc\x81" "abc ABC\xcc\x81" "def") ==
        V{"\xc7\x85" "ebug", " \xe4\xb8\xad\xe6\x96\x87", " \xcc\x81" "abc", " ABC\xcc\x81" "def"});
  // Whitespace as in the other patterns.
  CHECK(o200k_split("x  y\n\n z\t") == V{"x", " ", " y", "\n\n", " z", "\t"});
  CHECK(o200k_split("").empty());
  CHECK(crucible::lm::split_pattern_from_regex(crucible::lm::split_pattern_regex(SplitPattern::o200k)) ==
        SplitPattern::o200k);
}

TEST_CASE("real tokenizers: gpt-oss gives the ids of openai's harmony example") {
  const Tokenizer* tok = require_real("gptoss");
  if (!tok) return;
  CHECK(tok->vocab_size() == 200019);
  // The published example reply: analysis then final, token for token.
  const std::string reply =
      "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";
  const Ids expected{200005, 35644, 200008, 1844,  31064,  25,     392,    4827,  382, 220, 17,
                     659,    220,   17,     16842, 12295,  81645,  13,     51441, 6052, 13,  200007,
                     200006, 173781, 200005, 17196, 200008, 17,    659,    220,   17,  314, 220,
                     19,     13,    200002};
  CHECK(tok->encode(reply, /*add_special_tokens=*/true) == expected);
  CHECK(tok->decode(expected) == reply);
  CHECK(tok->decode(expected, /*skip_special_tokens=*/true) ==
        "analysisUser asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.assistantfinal2 + 2 = 4.");
  const std::vector<std::pair<std::string, TokenId>> specials{
      {"<|return|>", 200002}, {"<|constrain|>", 200003}, {"<|channel|>", 200005}, {"<|start|>", 200006},
      {"<|end|>", 200007},    {"<|message|>", 200008},   {"<|call|>", 200012},    {"<|endoftext|>", 199999}};
  for (const auto& [text, id] : specials) {
    CAPTURE(text);
    CHECK(tok->token_to_id(text) == id);
    CHECK(tok->is_special(id));
    CHECK(tok->encode(text) == Ids{id});
    // Untrusted text: the marker stays characters, several ordinary tokens.
    const Ids plain = tok->encode(text, true, /*parse_special=*/false);
    CHECK(plain.size() > 1);
    CHECK(tok->decode(plain) == text);
  }
}

TEST_CASE("real tokenizers: Qwen3 and Llama 3.1 ids and specials") {
  if (const Tokenizer* qwen = require_real("qwen3")) {
    CHECK(qwen->encode("Hello world") == Ids{9707, 1879});
    for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) CHECK(qwen->encode(special).size() == 1);
    // <think> is an added token that is not special: recognised even in untrusted text, kept by skip_special_tokens.
    const auto think = qwen->token_to_id("<think>");
    REQUIRE(think);
    CHECK(!qwen->is_special(*think));
    CHECK(qwen->encode("<think>", true, /*parse_special=*/false) == Ids{*think});
  }
  if (const Tokenizer* llama = require_real("llama3_1")) {
    CHECK(llama->encode("Hello world") == Ids{128000, 9906, 1917});
    CHECK(llama->encode("Hello world", /*add_special_tokens=*/false) == Ids{9906, 1917});
    CHECK(llama->token_to_id("<|eot_id|>") == 128009);
  }
}

TEST_CASE("real tokenizers: decode(encode(x)) gives x back on the corpus") {
  for (const std::string name : {"gptoss", "qwen3", "llama3_1"}) {
    const Tokenizer* tok = require_real(name);
    if (!tok) continue;
    std::size_t tokens = 0, bytes = 0;
    for (const std::string& text : corpus()) {
      CAPTURE(name);
      CAPTURE(text);
      const Ids ids = tok->encode(text, /*add_special_tokens=*/false);
      // Qwen3 normalises to NFC; the others keep the text as it is.
      CHECK(tok->decode(ids) == (name == "qwen3" ? crucible::lm::nfc(text) : text));
      // Untrusted text round-trips too, with no special id in it.
      const Ids plain = tok->encode(text, false, /*parse_special=*/false);
      for (TokenId id : plain) CHECK(!tok->is_special(id));
      tokens += ids.size();
      bytes += text.size();
    }
    // A real vocabulary packs several bytes into a token (the tiny fixtures about two).
    MESSAGE(name << ": " << tokens << " tokens for " << bytes << " bytes of corpus");
    CHECK(bytes > 3 * tokens);
  }
}

// tools/gpu_node/tokenizer_goldens.py writes the Hugging Face tokenizers library's ids for the corpus; this compares.
TEST_CASE("real tokenizers: ids equal the tokenizers library's goldens (CRUCIBLE_TOKENIZER_GOLDENS)") {
  const char* path = std::getenv("CRUCIBLE_TOKENIZER_GOLDENS");
  if (!path || !*path) {
    MESSAGE("skipped: CRUCIBLE_TOKENIZER_GOLDENS is not set (tools/gpu_node/tokenizer_goldens.py writes it)");
    return;
  }
  const json goldens = json::parse(read_file(path));
  REQUIRE(goldens.is_object());
  for (const auto& [name, entry] : goldens.items()) {
    const Tokenizer tok = Tokenizer::from_file(entry.at("tokenizer").get<std::string>());
    for (const json& c : entry.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      CAPTURE(name);
      CAPTURE(text);
      CHECK(tok.encode(text, true) == c.at("ids").get<Ids>());
      CHECK(tok.encode(text, false) == c.at("ids_plain").get<Ids>());
      CHECK(tok.decode(c.at("ids").get<Ids>()) == c.at("decoded").get<std::string>());
      CHECK(tok.decode(c.at("ids").get<Ids>(), true) == c.at("decoded_skip").get<std::string>());
    }
  }
}

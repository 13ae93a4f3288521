// The tokenizer against golden outputs of the Hugging Face tokenizers library (tests/fixtures/lm), plus
// hand-checked pre-tokenizer splits, NFC, round trips and error handling.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/tokenizer/chat_template.h"
#include "lm/tokenizer/nfc.h"
#include "lm/tokenizer/split_pattern.h"
#include "lm/tokenizer/utf8.h"

namespace {

using crucible::lm::ChatFormat;
using crucible::lm::ChatMessage;
using crucible::lm::ChatOptions;
using crucible::lm::SplitPattern;
using crucible::lm::Tokenizer;
using crucible::lm::TokenId;
using nlohmann::json;

const std::string fixture_dir = std::string(CRUCIBLE_SOURCE_DIR) + "/tests/fixtures/lm";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

const json& golden_cases() {
  static const json cases = json::parse(read_text(fixture_dir + "/tokenizer_cases.json"));
  return cases;
}

const Tokenizer& fixture_tokenizer(const std::string& kind) {
  static const Tokenizer qwen2 = Tokenizer::from_file(fixture_dir + "/qwen2_tiny");
  static const Tokenizer llama3 = Tokenizer::from_file(fixture_dir + "/llama_tiny/tokenizer.json");
  return kind == "qwen2" ? qwen2 : llama3;
}

json fixture_json(const std::string& dir) {
  return json::parse(read_text(fixture_dir + "/" + dir + "/tokenizer.json"));
}

std::vector<std::string> split(const std::string& text, SplitPattern pattern) {
  std::vector<std::string> out;
  for (std::string_view piece : crucible::lm::split_with_pattern(text, pattern)) out.emplace_back(piece);
  return out;
}

template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A tiny byte-level tokenizer.json with the GPT-2 pre-tokenizer, for model options the fixtures lack.
std::string tiny_tokenizer_json(bool ignore_merges, const json& merges) {
  json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", ignore_merges},
        {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"\xC4\xA0", 3}, {"bc", 4}, {"abc", 5}, {"\xC4\xA0" "a", 6}}},
        {"merges", merges}}}};
  return tokenizer.dump();
}

}  // namespace

TEST_CASE("tokenizer: encodings and decodings match the tokenizers library") {
  int checked = 0;
  for (const std::string kind : {"qwen2", "llama3"}) {
    const Tokenizer& tokenizer = fixture_tokenizer(kind);
    for (const json& c : golden_cases()[kind]["cases"]) {
      const std::string text = c["text"];
      INFO(kind << " text: " << json(text).dump());
      const auto ids = c["ids"].get<std::vector<TokenId>>();
      CHECK(tokenizer.encode(text, false) == ids);
      CHECK(tokenizer.encode(text, true) == c["ids_with_special_tokens"].get<std::vector<TokenId>>());
      CHECK(tokenizer.decode(ids, false) == c["decoded"].get<std::string>());
      CHECK(tokenizer.decode(ids, true) == c["decoded_skip_special"].get<std::string>());
      ++checked;
    }
  }
  CHECK(checked == 30);
}

TEST_CASE("tokenizer: chat renderings match transformers' chat templates") {
  for (const std::string kind : {"qwen2", "llama3"}) {
    const Tokenizer& tokenizer = fixture_tokenizer(kind);
    const ChatFormat format = crucible::lm::detect_chat_format(tokenizer);
    CHECK(format == (kind == "qwen2" ? ChatFormat::chatml : ChatFormat::llama3));
    for (const json& chat : golden_cases()[kind]["chat"]) {
      std::vector<ChatMessage> messages;
      if (!chat["system"].is_null()) messages.push_back({"system", chat["system"]});
      messages.push_back({"user", chat["user"]});
      CHECK(crucible::lm::render_chat(format, messages) == chat["rendered"].get<std::string>());

      // The same conversation given as options.system_prompt renders identically.
      if (!chat["system"].is_null()) {
        ChatOptions options;
        options.system_prompt = chat["system"].get<std::string>();
        CHECK(crucible::lm::render_chat(format, {messages.back()}, options) == chat["rendered"].get<std::string>());
      }
    }
  }
}

TEST_CASE("chat templates: generation prompt, Llama-3 trimming, unknown formats") {
  const std::vector<ChatMessage> messages = {{"user", "\t hi \n"}, {"assistant", " ok "}};
  ChatOptions options;
  options.add_generation_prompt = false;
  CHECK(crucible::lm::render_chat(ChatFormat::chatml, messages, options) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\t hi \n<|im_end|>\n"
        "<|im_start|>assistant\n ok <|im_end|>\n");
  CHECK(crucible::lm::render_chat(ChatFormat::llama3, messages, options) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>");
  // Python's strip() also removes U+001C..U+001F and Unicode spaces such as U+3000.
  CHECK(crucible::lm::render_chat(ChatFormat::llama3, {{"user", "\x1f\xe3\x80\x80x\xc2\xa0"}}, options) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
  CHECK(crucible::lm::render_chat(ChatFormat::chatml, {}, {}) == "<|im_start|>assistant\n");

  const Tokenizer tiny = Tokenizer::from_json(tiny_tokenizer_json(false, json::array({"b c"})));
  CHECK(contains(error_of([&] { crucible::lm::detect_chat_format(tiny); }), "no known chat format"));
}

TEST_CASE("pre-tokenizer: hand-checked splits of the Qwen2, Llama-3 and GPT-2 patterns") {
  using V = std::vector<std::string>;
  // \s+(?!\S) leaves the last space of a run before a word to ` ?\p{L}+`-style alternatives.
  CHECK(split("a  b", SplitPattern::qwen2) == V{"a", " ", " b"});
  // \s*[\r\n]+ takes the whitespace up to and including the run's last newline.
  CHECK(split("x   \n\ny", SplitPattern::qwen2) == V{"x", "   \n\n", "y"});
  CHECK(split("x \n \ny  ", SplitPattern::qwen2) == V{"x", " \n \n", "y", "  "});
  CHECK(split("x\t\ty", SplitPattern::qwen2) == V{"x", "\t", "\ty"});
  CHECK(split("a\xe3\x80\x80\xe3\x80\x80" "b", SplitPattern::qwen2) == V{"a", "\xe3\x80\x80", "\xe3\x80\x80" "b"});
  CHECK(split("f(x);\n\n}", SplitPattern::qwen2) == V{"f", "(x", ");\n\n", "}"});
  // Contractions: case-insensitive for Qwen2/Llama-3, case-sensitive for GPT-2.
  CHECK(split("I'M you'Re", SplitPattern::qwen2) == V{"I", "'M", " you", "'Re"});
  CHECK(split("I'M you're", SplitPattern::gpt2) == V{"I", "'", "M", " you", "'re"});
  CHECK(split("it\xc5\xbf", SplitPattern::qwen2) == V{"it\xc5\xbf"});
  CHECK(split("'\xc5\xbf", SplitPattern::qwen2) == V{"'\xc5\xbf"});
  // Digits: one per piece, up to three, or a whole run.
  CHECK(split("12345", SplitPattern::qwen2) == V{"1", "2", "3", "4", "5"});
  CHECK(split("12345", SplitPattern::llama3) == V{"123", "45"});
  CHECK(split("x 12345", SplitPattern::gpt2) == V{"x", " 12345"});
  CHECK(split("Hello world!!  \n", SplitPattern::gpt2) == V{"Hello", " world", "!!", "  \n"});
  CHECK(split("a  b", SplitPattern::gpt2) == V{"a", " ", " b"});
  CHECK(split("", SplitPattern::qwen2).empty());

  // The fixture's whitespace case, cut as the regex defines; every cut must also be a token boundary
  // in the ids the tokenizers library produced.
  const std::string text = "a   b\n\n\n  c\t\td   \n  \r\n\r\nend    ";
  const V expected{"a", "  ", " b", "\n\n\n", " ", " c", "\t", "\td", "   \n  \r\n\r\n", "end", "    "};
  for (const std::string kind : {"qwen2", "llama3"}) {
    const Tokenizer& tokenizer = fixture_tokenizer(kind);
    CHECK(tokenizer.pre_tokenize(text) == expected);
    const json& golden = golden_cases()[kind]["cases"][2];
    REQUIRE(golden["text"] == text);
    std::set<std::size_t> token_ends;
    std::size_t offset = 0;
    for (TokenId id : golden["ids"].get<std::vector<TokenId>>()) {
      offset += tokenizer.decode_bytes({id}).size();
      token_ends.insert(offset);
    }
    offset = 0;
    for (const std::string& piece : expected) {
      offset += piece.size();
      CHECK_MESSAGE(token_ends.count(offset) == 1, kind << ": no token ends at byte " << offset);
    }
  }
}

TEST_CASE("NFC: composition, Hangul, exclusions, reordering") {
  using crucible::lm::nfc;
  CHECK(nfc("plain ascii") == "plain ascii");
  CHECK(nfc("e\xcc\x81") == "\xc3\xa9");                                       // e + U+0301 -> é
  CHECK(nfc("A\xcc\x8a") == "\xc3\x85");                                       // A + ring -> Å
  CHECK(nfc("\xe2\x84\xab") == "\xc3\x85");                                    // Angstrom sign (singleton)
  CHECK(nfc("\xe0\xa5\x98") == "\xe0\xa4\x95\xe0\xa4\xbc");                    // U+0958 is excluded
  CHECK(nfc("\xcd\x84") == "\xcc\x88\xcc\x81");                                // U+0344 non-starter decomposition
  CHECK(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8") == "\xea\xb0\x81");        // L V T jamo -> U+AC01
  CHECK(nfc("\xea\xb0\x80\xe1\x86\xa8") == "\xea\xb0\x81");                    // LV + T -> LVT
  CHECK(nfc("q\xcc\x87\xcc\xa3") == "q\xcc\xa3\xcc\x87");                      // reordered, no composite
  CHECK(nfc("\xe1\xb8\x8b\xcc\xa3") == "\xe1\xb8\x8d\xcc\x87");                // U+1E0B U+0323 -> U+1E0D U+0307
  CHECK(nfc("a\xcc\x81\xcc\x81") == "\xc3\xa1\xcc\x81");                       // second acute is blocked
  CHECK(nfc("\xcc\x81" "a") == "\xcc\x81" "a");                                // leading combining mark
  CHECK_THROWS_AS(nfc("\xff"), std::invalid_argument);
}

TEST_CASE("UTF-8: lossy decoding replaces maximal invalid prefixes like Rust's from_utf8_lossy") {
  using crucible::lm::utf8_lossy;
  const std::string fffd = "\xef\xbf\xbd";
  CHECK(utf8_lossy("ok \xe2\x82\xac") == "ok \xe2\x82\xac");
  CHECK(utf8_lossy("\xf0\x9f\x98") == fffd);
  CHECK(utf8_lossy("a\xe2\x82" "b") == "a" + fffd + "b");
  CHECK(utf8_lossy("\xc0\x80") == fffd + fffd);
  CHECK(utf8_lossy("\xed\xa0\x80") == fffd + fffd + fffd);
  CHECK(utf8_lossy("\xf4\x90\x80\x80") == fffd + fffd + fffd + fffd);
  CHECK(utf8_lossy("\x80\xff") == fffd + fffd);
}

TEST_CASE("tokenizer: decode(encode(x)) is NFC(x) on unusual text") {
  std::vector<std::string> texts = {
      "emoji \xf0\x9f\x98\x80\xf0\x9f\xa6\x80 \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb "
      "flags \xf0\x9f\x87\xaf\xf0\x9f\x87\xb5",
      "CJK \xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xa8\xe5\xa4\xa7\xe9\x98\xaa \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
      "combining e\xcc\x81\xcc\xa3 o\xcc\x88\xcc\x84 \xe1\x84\x80\xe1\x85\xa1 \xe2\x84\xab",
      "windows\r\nline\r\n\r\nends\r",
      std::string(300, ' ') + "x" + std::string(1000, '\n') + std::string(77, '\t') + "y" + std::string(50, ' '),
      "mixed\xe3\x80\x80spaces\xc2\xa0here\xe2\x80\xa8there\xc2\x85",
      "control \x01\x02\x7f bytes and <|im_start literal |> <tool_call",
  };
  std::mt19937 random(12345);
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7e}, {0x09, 0x0d}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x4e00, 0x4e80}, {0x1f600, 0x1f64f},
      {0x1100, 0x11ff}, {0xac00, 0xac40}, {0x2000, 0x206f}, {0x3000, 0x3003}, {0x10ffff, 0x10ffff}};
  for (int n = 0; n < 200; ++n) {
    std::string text;
    const int length = static_cast<int>(random() % 40);
    for (int i = 0; i < length; ++i) {
      const auto& range = ranges[random() % ranges.size()];
      crucible::lm::append_utf8(text, range.first + static_cast<char32_t>(random() % (range.second - range.first + 1)));
    }
    texts.push_back(text);
  }
  for (int n = 0; n < 100; ++n) {
    std::string bytes;
    const int length = static_cast<int>(random() % 64);
    for (int i = 0; i < length; ++i) bytes.push_back(static_cast<char>(random() % 256));
    texts.push_back(crucible::lm::utf8_lossy(bytes));
  }
  for (const std::string& text : texts) {
    INFO(json(text).dump());
    const Tokenizer& qwen2 = fixture_tokenizer("qwen2");
    const Tokenizer& llama3 = fixture_tokenizer("llama3");
    CHECK(qwen2.decode(qwen2.encode(text, false)) == crucible::lm::nfc(text));
    CHECK(llama3.decode(llama3.encode(text, false)) == text);
    CHECK(llama3.decode(llama3.encode(text, true), true) == text);
  }
}

TEST_CASE("tokenizer: vocabulary queries and byte-level decoding") {
  const Tokenizer& qwen2 = fixture_tokenizer("qwen2");
  CHECK(qwen2.vocab_size() == 1002);
  CHECK(qwen2.token_to_id("<|im_start|>") == 1);
  CHECK(qwen2.token_to_id("<tool_call>") == 1000);
  CHECK(qwen2.token_to_id("\xc4\xa0\xc4\xa0") == qwen2.encode("  ", false).at(0));  // "ĠĠ"
  CHECK_FALSE(qwen2.token_to_id("no such token").has_value());
  CHECK(qwen2.id_to_token(1001) == std::optional<std::string>("</tool_call>"));
  CHECK_FALSE(qwen2.id_to_token(5000).has_value());
  CHECK(qwen2.is_special(2));
  CHECK_FALSE(qwen2.is_special(1000));
  CHECK_FALSE(qwen2.is_special(300));
  CHECK(qwen2.special_ids() == std::vector<TokenId>{0, 1, 2});
  CHECK(fixture_tokenizer("llama3").special_ids() == std::vector<TokenId>{0, 1, 2, 3, 4});
  CHECK(fixture_tokenizer("llama3").encode("", true) == std::vector<TokenId>{0});

  // A character split over several byte tokens: each piece alone is invalid UTF-8.
  const std::string crab = "\xf0\x9f\xa6\x80";
  const auto ids = qwen2.encode(crab, false);
  REQUIRE(ids.size() > 1);
  CHECK(qwen2.decode_bytes(ids) == crab);
  CHECK(qwen2.decode_bytes({ids[0]}) == crab.substr(0, qwen2.decode_bytes({ids[0]}).size()));
  CHECK(qwen2.decode({ids[0]}) == "\xef\xbf\xbd");
  // Unknown ids are skipped, as the reference does.
  CHECK(qwen2.decode({-1, 99999, ids[0], ids[1], ids[2]}) == qwen2.decode({ids[0], ids[1], ids[2]}));
}

TEST_CASE("tokenizer: parse_special=false keeps special tokens as text") {
  const Tokenizer& qwen2 = fixture_tokenizer("qwen2");
  const std::string text = "<|im_start|>user\nhi<|im_end|> <tool_call>";
  const auto parsed = qwen2.encode(text, false, true);
  const auto literal = qwen2.encode(text, false, false);
  CHECK(parsed.front() == 1);
  for (TokenId id : literal) CHECK_FALSE(qwen2.is_special(id));
  CHECK(literal.size() > parsed.size());
  CHECK(literal.back() == 1000);  // non-special added tokens are still recognised
  CHECK(qwen2.decode(literal) == text);
  CHECK(qwen2.decode(literal, true) == text);
  const auto alone = qwen2.encode("<|im_start|>", false, false);
  CHECK(alone.size() > 1);
  CHECK(qwen2.decode(alone) == "<|im_start|>");
}

TEST_CASE("tokenizer: added tokens with lstrip and rstrip swallow neighbouring whitespace") {
  json spec = fixture_json("qwen2_tiny");
  spec["added_tokens"].push_back({{"id", 1002}, {"content", "<mask>"}, {"single_word", false}, {"lstrip", true},
                                  {"rstrip", true}, {"normalized", false}, {"special", true}});
  const Tokenizer tokenizer = Tokenizer::from_json(spec.dump());
  std::vector<TokenId> expected = tokenizer.encode("a", false);
  expected.push_back(1002);
  for (TokenId id : tokenizer.encode("b", false)) expected.push_back(id);
  CHECK(tokenizer.encode("a \t<mask>  \nb", false) == expected);
  CHECK(tokenizer.vocab_size() == 1003);
}

TEST_CASE("tokenizer: BPE merges in both formats, ignore_merges, GPT-2 byte-level pre-tokenizer") {
  for (const json& merges : {json::array({"b c", "\xC4\xA0 a"}), json::array({{"b", "c"}, {"\xC4\xA0", "a"}})}) {
    const Tokenizer merging = Tokenizer::from_json(tiny_tokenizer_json(false, merges));
    const Tokenizer direct = Tokenizer::from_json(tiny_tokenizer_json(true, merges));
    CHECK(merging.encode("abc") == std::vector<TokenId>{0, 4});
    CHECK(direct.encode("abc") == std::vector<TokenId>{5});
    CHECK(merging.encode(" abc") == std::vector<TokenId>{6, 4});
    CHECK(direct.encode(" abc") == std::vector<TokenId>{6, 4});
    CHECK(merging.pre_tokenize(" abc  a") == std::vector<std::string>{" abc", " ", " a"});
    CHECK(merging.decode({6, 4, 3, 5}) == " abc abc");
    CHECK(merging.vocab_size() == 7);
  }
}

TEST_CASE("tokenizer: clear errors for malformed or unsupported tokenizer.json") {
  CHECK(contains(error_of([] { Tokenizer::from_json("{\"model\": [1, 2"); }), "tokenizer.json: invalid JSON"));
  CHECK(contains(error_of([] { Tokenizer::from_file("/nonexistent/dir/tokenizer.json"); }), "cannot open"));

  json bad_pattern = fixture_json("qwen2_tiny");
  bad_pattern["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  CHECK(contains(error_of([&] { Tokenizer::from_json(bad_pattern.dump()); }),
                 "tokenizer.json: unsupported pre-tokenizer Split pattern: \\w+|\\s+"));

  json word_piece = fixture_json("qwen2_tiny");
  word_piece["model"]["type"] = "WordPiece";
  CHECK(contains(error_of([&] { Tokenizer::from_json(word_piece.dump()); }), "unsupported model type WordPiece"));

  json byte_fallback = fixture_json("llama_tiny");
  byte_fallback["model"]["byte_fallback"] = true;
  CHECK(contains(error_of([&] { Tokenizer::from_json(byte_fallback.dump()); }), "byte_fallback"));

  json lowercase = fixture_json("llama_tiny");
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  CHECK(contains(error_of([&] { Tokenizer::from_json(lowercase.dump()); }), "unsupported normalizer Lowercase"));

  json bad_merge = fixture_json("llama_tiny");
  bad_merge["model"]["merges"].push_back("zzz qqq");
  CHECK(contains(error_of([&] { Tokenizer::from_json(bad_merge.dump()); }), "missing from the vocabulary"));

  json single_word = fixture_json("llama_tiny");
  single_word["added_tokens"][0]["single_word"] = true;
  CHECK(contains(error_of([&] { Tokenizer::from_json(single_word.dump()); }), "single_word is not supported"));

  CHECK_THROWS_AS(fixture_tokenizer("qwen2").encode("bad \xc3 utf8"), std::invalid_argument);
}

TEST_CASE("tokenizer: encoding about 1 MB of source code is fast") {
  std::string text;
  const std::string runtime_dir = std::string(CRUCIBLE_SOURCE_DIR) + "/runtime";
  for (const auto& entry : std::filesystem::recursive_directory_iterator(runtime_dir)) {
    const auto extension = entry.path().extension();
    if (entry.is_regular_file() && (extension == ".cpp" || extension == ".h")) text += read_text(entry.path().string());
  }
  REQUIRE(!text.empty());
  while (text.size() < (1u << 20)) text += text;
  text.resize(1u << 20);
  text = crucible::lm::utf8_lossy(text);  // the cut may have split a character

  for (const std::string kind : {"qwen2", "llama3"}) {
    const Tokenizer fresh = Tokenizer::from_file(fixture_dir + (kind == "qwen2" ? "/qwen2_tiny" : "/llama_tiny"));
    const auto start = std::chrono::steady_clock::now();
    const auto ids = fresh.encode(text, false);
    const double cold = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto again = std::chrono::steady_clock::now();
    CHECK(fresh.encode(text, false) == ids);
    const double warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
    MESSAGE(kind << ": " << text.size() << " bytes -> " << ids.size() << " ids in " << cold * 1e3
                 << " ms (empty cache), " << warm * 1e3 << " ms (warm cache)");
    CHECK(cold < 10.0);
    CHECK(fresh.decode(ids) == (kind == "qwen2" ? crucible::lm::nfc(text) : text));
  }
}

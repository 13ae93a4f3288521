// The plain-C++ side of the language model: safetensors, model directories, config.json, completion text.
#include <doctest/doctest.h>

#include <cstring>

#include "lm/format/completion_text.h"
#include "lm/format/model_config.h"
#include "lm/format/model_files.h"
#include "lm/format/safetensors.h"
#include "lm/lm_support.h"

using namespace crucible;
using namespace crucible::lm;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> floats(std::initializer_list<float> values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

// A safetensors file from a literal header and data section.
fs::path raw_file(const fs::path& dir, const std::string& header, std::size_t data_bytes, uint64_t claimed_len = 0) {
  const auto path = dir / "raw.safetensors";
  std::string bytes(8, '\0');
  const uint64_t len = claimed_len ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  bytes += header + std::string(data_bytes, '\0');
  test::write_file(path, bytes);
  return path;
}

std::string error_of(const fs::path& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const ModelFormatError& e) {
    return e.what();
  }
  return "";
}

std::string config_error(const std::string& json) {
  try {
    parse_model_config(json, "cfg.json");
  } catch (const ModelFormatError& e) {
    return e.what();
  }
  return "";
}

const std::string kBaseConfig =
    R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 32)";

}  // namespace

TEST_CASE("safetensors: what is written reads back, with dtypes, shapes, bytes and metadata") {
  test::ScratchDir dir("st");
  std::vector<TensorBytes> tensors = {
      {"b.weight", DType::f32, {2, 2}, floats({1, 2, 3, 4})},
      {"a.bias", DType::bf16, {3}, std::vector<std::byte>(6, std::byte{0x3f})},
      {"scalar", DType::i64, {}, std::vector<std::byte>(8, std::byte{1})},
  };
  write_safetensors(dir.path() / "t.safetensors", tensors, {{"format", "pt"}});
  const auto file = SafetensorsFile::open(dir.path() / "t.safetensors");
  REQUIRE(file->tensors().size() == 3);
  CHECK(file->metadata().at("format") == "pt");
  const auto* w = file->find("b.weight");
  REQUIRE(w);
  CHECK(w->dtype == DType::f32);
  CHECK(w->shape == std::vector<int64_t>{2, 2});
  float values[4];
  std::memcpy(values, w->data, 16);
  CHECK(values[3] == 4.0f);
  CHECK(file->find("a.bias")->nbytes == 6);
  CHECK(file->find("scalar")->numel() == 1);
  CHECK(file->find("missing") == nullptr);
  // The header is padded so the data section starts 8-byte aligned.
  CHECK(reinterpret_cast<std::uintptr_t>(file->find("a.bias")->data) % 8 == 0);
}

TEST_CASE("safetensors: malformed files are refused with the file named and the reason") {
  test::ScratchDir dir("st-bad");
  const auto short_path = dir.path() / "short.safetensors";
  test::write_file(short_path, "abc");
  CHECK(error_of(short_path).find("too short") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), "{}", 0, 1000)).find("past the end") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), "{not json", 0)).find("not JSON") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8))
            .find("outside the data section") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8))
            .find("do not match") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(),
                          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12))
            .find("overlap") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2))
            .find("F8_E4M3") != std::string::npos);
  CHECK(error_of(raw_file(dir.path(), R"({"x":{"dtype":"F32","shape":"oops","data_offsets":[0,2]}})", 2))
            .find("malformed entry") != std::string::npos);
  CHECK(error_of(dir.path() / "absent.safetensors").find("cannot open") != std::string::npos);
}

TEST_CASE("model files: a single file and an index of shards give every tensor") {
  const auto qwen = ModelFiles::open(test::lm_fixture("qwen2_tiny"));
  CHECK(qwen.find("model.embed_tokens.weight"));
  CHECK(qwen.find("lm_head.weight") == nullptr);  // tied
  const auto llama = ModelFiles::open(test::lm_fixture("llama_tiny"));
  CHECK(llama.names().size() == 21);
  CHECK(llama.require("lm_head.weight").dtype == DType::bf16);
  CHECK(ModelFiles::open(test::lm_fixture("qwen2_tiny_f16")).require("lm_head.weight").dtype == DType::f16);
  CHECK_THROWS_WITH_AS(llama.require("model.layers.9.mlp.up_proj.weight"), doctest::Contains("missing tensor"),
                       ModelFormatError);
}

TEST_CASE("model files: a missing shard, a promised tensor absent, no weights at all") {
  test::ScratchDir dir("shards");
  fs::copy(test::lm_fixture("llama_tiny"), dir.path() / "m");
  fs::remove(dir.path() / "m" / "model-00002-of-00003.safetensors");
  CHECK_THROWS_WITH_AS(ModelFiles::open(dir.path() / "m"), doctest::Contains("which is missing"), ModelFormatError);

  fs::copy(test::lm_fixture("llama_tiny"), dir.path() / "n");
  auto index = test::read_file(dir.path() / "n" / "model.safetensors.index.json");
  const auto at = index.find("\"weight_map\": {");
  REQUIRE(at != std::string::npos);
  index.insert(at + 15, "\"model.extra.weight\": \"model-00001-of-00003.safetensors\", ");
  test::write_file(dir.path() / "n" / "model.safetensors.index.json", index);
  CHECK_THROWS_WITH_AS(ModelFiles::open(dir.path() / "n"), doctest::Contains("model.extra.weight"), ModelFormatError);

  fs::create_directories(dir.path() / "empty");
  CHECK_THROWS_WITH_AS(ModelFiles::open(dir.path() / "empty"), doctest::Contains("no model.safetensors"),
                       ModelFormatError);
}

TEST_CASE("config.json: the fixture families, with transformers 5's rope_parameters") {
  const auto qwen = load_model_config(test::lm_fixture("qwen2_tiny"));
  CHECK(qwen.architecture == Architecture::qwen2);
  CHECK(qwen.attention_bias);
  CHECK(qwen.tie_word_embeddings);
  CHECK(qwen.rope_theta == 1000000.0);
  CHECK(!qwen.rope_scaling);
  CHECK(qwen.head_dim == 16);
  CHECK(qwen.num_kv_heads == 2);
  CHECK(qwen.eos_token_ids == std::vector<int64_t>{2});
  const auto llama = load_model_config(test::lm_fixture("llama_tiny"));
  CHECK(llama.architecture == Architecture::llama);
  CHECK(!llama.attention_bias);
  CHECK(!llama.tie_word_embeddings);
  CHECK(llama.rope_theta == 500000.0);
  REQUIRE(llama.rope_scaling);
  CHECK(llama.rope_scaling->factor == 8.0);
  CHECK(llama.rope_scaling->original_max_position_embeddings == 64.0);
  const auto gen = load_generation_defaults(test::lm_fixture("llama_tiny"));
  CHECK(gen.temperature.value_or(0) == doctest::Approx(0.7));
  CHECK(gen.top_p.value_or(0) == doctest::Approx(0.9));
  CHECK(gen.eos_token_ids == std::vector<int64_t>{4});
}

TEST_CASE("config.json: the older rope_theta + rope_scaling keys, eos lists, defaults") {
  const auto c = parse_model_config(kBaseConfig + R"(, "rope_theta": 500000.0, "eos_token_id": [7, 8],
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}, "tie_word_embeddings": true})");
  CHECK(c.rope_theta == 500000.0);
  REQUIRE(c.rope_scaling);
  CHECK(c.rope_scaling->factor == 32.0);
  CHECK(c.eos_token_ids == std::vector<int64_t>{7, 8});
  CHECK(c.head_dim == 4);
  CHECK(c.tie_word_embeddings);
}

TEST_CASE("config.json: unsupported or malformed configs name the key") {
  CHECK(config_error("{oops").find("not valid JSON") != std::string::npos);
  CHECK(config_error(R"({"model_type": "mistral"})").find("'mistral' is not supported") != std::string::npos);
  CHECK(config_error(R"({"model_type": "llama", "vocab_size": 10})").find("missing key 'hidden_size'") !=
        std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})")
            .find("rope type 'yarn'") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "hidden_act": "gelu"})").find("hidden_act") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "use_sliding_window": true})").find("sliding-window") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "vocab_size": "ten"})").find("'vocab_size' has the wrong type") !=
        std::string::npos);
  const auto odd_heads = std::string(kBaseConfig).replace(kBaseConfig.find("\"num_key_value_heads\": 1"), 24,
                                                          "\"num_key_value_heads\": 3");
  CHECK(config_error(odd_heads + "}").find("multiple of num_key_value_heads") != std::string::npos);
  CHECK(config_error(kBaseConfig + "}").empty());
}

TEST_CASE("completion text: stop strings across token boundaries, the earliest wins, text cut before it") {
  CompletionText text({"```", "\n\n"});
  CHECK_FALSE(text.append("int x"));
  CHECK_FALSE(text.append(";`"));
  CHECK_FALSE(text.append("`"));
  CHECK(text.append("`\n\nmore"));
  CHECK(text.text() == "int x;");
  CHECK(text.stopped());

  CompletionText no_stops;
  no_stops.append("a\xE4");  // half of a character: replaced, never invalid UTF-8
  CHECK(no_stops.text() == "a\xEF\xBF\xBD");
  no_stops.append("\xB8\xAD");
  CHECK(no_stops.text() == "a\xE4\xB8\xAD");
}

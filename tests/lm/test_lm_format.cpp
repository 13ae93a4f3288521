// The plain-C++ side of the language model: safetensors, model directories, config.json, completion text.
#include <doctest/doctest.h>

#include <cmath>
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
  CHECK(config_error(kBaseConfig + R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}})")
            .find("rope type 'dynamic'") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "hidden_act": "gelu"})").find("hidden_act") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "use_sliding_window": true})").find("sliding-window") != std::string::npos);
  CHECK(config_error(kBaseConfig + R"(, "vocab_size": "ten"})").find("'vocab_size' has the wrong type") !=
        std::string::npos);
  const auto odd_heads = std::string(kBaseConfig).replace(kBaseConfig.find("\"num_key_value_heads\": 1"), 24,
                                                          "\"num_key_value_heads\": 3");
  CHECK(config_error(odd_heads + "}").find("multiple of num_key_value_heads") != std::string::npos);
  CHECK(config_error(kBaseConfig + "}").empty());
}

namespace {

// gpt-oss-20b's config.json as transformers writes it, shrunk (two layers, four experts); `extra` is spliced in.
std::string gpt_oss_config(const std::string& extra = "") {
  return R"({"model_type": "gpt_oss", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
      "max_position_embeddings": 4096, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 3,
      "layer_types": ["sliding_attention", "full_attention"], "rms_norm_eps": 1e-5, "swiglu_limit": 7.0,
      "rope_theta": 150000.0, "tie_word_embeddings": false, "hidden_act": "silu",
      "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                       "truncate": false, "original_max_position_embeddings": 128})" +
         extra + "}";
}

const std::string kQwen3Config =
    R"({"model_type": "qwen3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 256, "rope_theta": 1000000.0, "attention_bias": false,
        "use_sliding_window": false, "sliding_window": null, "tie_word_embeddings": true,
        "layer_types": ["full_attention", "full_attention"]})";

// `text` with its first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("config.json: each family's attention and MLP layout, by table") {
  struct Row {
    std::string name, json;
    Architecture arch;
    bool qkv_bias, o_bias, qk_norm, sinks, moe;
  };
  const Row rows[] = {
      {"qwen2", R"({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
          "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32})",
       Architecture::qwen2, true, false, false, false, false},
      {"llama", kBaseConfig + "}", Architecture::llama, false, false, false, false, false},
      {"llama with bias", kBaseConfig + R"(, "attention_bias": true})", Architecture::llama, true, true, false, false,
       false},
      {"qwen3", kQwen3Config, Architecture::qwen3, false, false, true, false, false},
      {"gpt_oss", gpt_oss_config(), Architecture::gpt_oss, true, true, false, true, true},
  };
  for (const auto& r : rows) {
    CAPTURE(r.name);
    const auto c = parse_model_config(r.json);
    CHECK(c.architecture == r.arch);
    CHECK(c.attention_bias == r.qkv_bias);
    CHECK(c.o_bias == r.o_bias);
    CHECK(c.qk_norm == r.qk_norm);
    CHECK(c.attention_sinks == r.sinks);
    CHECK(c.moe.has_value() == r.moe);
    CHECK(static_cast<int64_t>(c.layer_types.size()) == c.num_layers);
  }
}

TEST_CASE("config.json: gpt-oss's experts, windows and YaRN keys") {
  const auto c = parse_model_config(gpt_oss_config());
  REQUIRE(c.moe);
  CHECK(c.moe->num_experts == 4);
  CHECK(c.moe->experts_per_token == 2);
  CHECK(c.moe->swiglu_limit == 7.0);
  CHECK(c.moe->swiglu_alpha == doctest::Approx(1.702));
  CHECK(c.sliding_window == 3);
  CHECK(c.layer_types == std::vector<AttentionKind>{AttentionKind::sliding, AttentionKind::full});
  CHECK(!c.tie_word_embeddings);
  CHECK(c.head_dim == 8);
  REQUIRE(c.yarn);
  CHECK(!c.rope_scaling);
  CHECK(c.yarn->factor == 32.0);
  CHECK(c.yarn->original_max_position_embeddings == 128.0);
  CHECK(!c.yarn->truncate);
  CHECK(c.yarn->attention_factor == doctest::Approx(0.1 * std::log(32.0) + 1.0));

  // The original checkpoint's spelling, and no layer_types: even layers slide.
  const auto older = replaced(replaced(gpt_oss_config(), R"("num_experts_per_tok": 2)", R"("experts_per_token": 3)"),
                              R"("layer_types": ["sliding_attention", "full_attention"],)", "");
  const auto o = parse_model_config(older);
  CHECK(o.moe->experts_per_token == 3);
  CHECK(o.layer_types == std::vector<AttentionKind>{AttentionKind::sliding, AttentionKind::full});
  const auto mx = parse_model_config(gpt_oss_config(R"(, "quantization_config": {"quant_method": "mxfp4"})"));
  CHECK(mx.moe);
}

TEST_CASE("config.json: what the new families cannot run is refused with the key named") {
  const std::pair<std::string, std::string> rows[] = {
      {gpt_oss_config(R"(, "num_local_experts": 0)"), "num_local_experts"},
      {gpt_oss_config(R"(, "num_experts_per_tok": 9)"), "num_experts_per_tok"},
      {gpt_oss_config(R"(, "sliding_window": 0)"), "sliding_window"},
      {gpt_oss_config(R"(, "swiglu_alpha": 0)"), "swiglu_alpha"},
      {gpt_oss_config(R"(, "layer_types": ["sliding_attention"])"), "layer_types has 1 entries"},
      {gpt_oss_config(R"(, "layer_types": ["chunked_attention", "full_attention"])"), "'chunked_attention'"},
      {gpt_oss_config(R"(, "quantization_config": {"quant_method": "fp8"})"), "quantization 'fp8'"},
      {gpt_oss_config(R"(, "rope_scaling": {"rope_type": "yarn", "factor": -1.0})"), "yarn rope"},
      {replaced(kQwen3Config, R"("use_sliding_window": false)", R"("use_sliding_window": true)"),
       "sliding-window attention is not supported for qwen3"},
      {replaced(kQwen3Config, R"(["full_attention")", R"(["sliding_attention")"), "not supported for qwen3 (layer_types)"},
      {kBaseConfig + R"(, "quantization_config": {"quant_method": "mxfp4"}})", "quantization 'mxfp4'"},
  };
  for (const auto& [json, expected] : rows) {
    CAPTURE(json);
    CHECK(config_error(json).find(expected) != std::string::npos);
  }
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

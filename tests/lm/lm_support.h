#pragma once
// Paths of the language-model golden fixtures (made by tools/lm_fixtures/make_fixtures.py).
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/format/safetensors.h"

#include "support.h"

namespace crucible::test {

inline std::filesystem::path lm_fixture(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "lm" / name;
}

// The int64 tensors (prompt_i, greedy_i) of a fixture's expected.safetensors, without torch.
inline std::map<std::string, std::vector<int64_t>> read_golden_ids(const std::string& fixture) {
  const auto file = lm::SafetensorsFile::open(lm_fixture(fixture) / "expected.safetensors");
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& t : file->tensors()) {
    if (t.dtype != lm::DType::i64) continue;
    std::vector<int64_t> ids(t.numel());
    std::memcpy(ids.data(), t.data, t.nbytes);
    out[t.name] = std::move(ids);
  }
  return out;
}

// The tiny model with a harmony tokenizer: harmony's seven markers take the ids of its ChatML and tool-call tokens and of
// three ordinary tokens (whose merges go), so the weights stay as they are. Its eos id 2 becomes <|return|>.
inline std::filesystem::path harmony_tiny_model(const std::filesystem::path& dir) {
  const std::filesystem::path source = lm_fixture("qwen2_tiny");
  std::filesystem::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors", "generation_config.json"})
    std::filesystem::copy_file(source / file, dir / file);
  auto tokenizer = nlohmann::json::parse(read_file(source / "tokenizer.json"));
  const std::map<int, std::string> markers{{1, "<|start|>"}, {2, "<|return|>"},    {997, "<|end|>"},
                                           {998, "<|constrain|>"}, {999, "<|call|>"}, {1000, "<|channel|>"},
                                           {1001, "<|message|>"}};
  auto& vocab = tokenizer["model"]["vocab"];
  std::set<std::string> stolen;
  for (const auto& [text, id] : vocab.items())
    if (markers.count(id.get<int>())) stolen.insert(text);
  for (const auto& text : stolen) vocab.erase(text);
  auto merges = nlohmann::json::array();
  for (const auto& pair : tokenizer["model"]["merges"]) {
    const std::string a = pair[0], b = pair[1];
    if (!stolen.count(a) && !stolen.count(b) && !stolen.count(a + b)) merges.push_back(pair);
  }
  tokenizer["model"]["merges"] = merges;
  auto added = nlohmann::json::array();
  for (const auto& [id, content] : markers)
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  tokenizer["added_tokens"] = added;
  write_file(dir / "tokenizer.json", tokenizer.dump());
  return dir;
}

inline const char* const kLmFixtures[] = {"qwen2_tiny", "qwen2_tiny_f16", "llama_tiny"};

}  // namespace crucible::test

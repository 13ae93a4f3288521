#pragma once
// Paths of the language-model golden fixtures (made by tools/lm_fixtures/make_fixtures.py).
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

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

inline const char* const kLmFixtures[] = {"qwen2_tiny", "qwen2_tiny_f16", "llama_tiny"};

}  // namespace crucible::test

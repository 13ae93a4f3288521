#pragma once
// Paths of the language-model golden fixtures (made by tools/lm_fixtures/make_fixtures.py).
#include <filesystem>
#include <string>

#include "support.h"

namespace crucible::test {

inline std::filesystem::path lm_fixture(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "lm" / name;
}

inline const char* const kLmFixtures[] = {"qwen2_tiny", "qwen2_tiny_f16", "llama_tiny"};

}  // namespace crucible::test

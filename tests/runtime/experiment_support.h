#pragma once
// For suites that check how experiments are refused: the error a text that must not parse gives.
#include <doctest/doctest.h>

#include <string>

#include "config/toml_reader.h"
#include "experiment/experiment.h"

namespace crucible::test {

// Parses text expected to fail and returns the error; fails the test when it parses.
inline config::ConfigError failure(const std::string& text) {
  try {
    experiment::parse_experiment(text, "bad.toml");
  } catch (const config::ConfigError& e) {
    return e;
  }
  FAIL("parsed without error: " << text);
  return config::ConfigError("", 0, "", "");
}

}  // namespace crucible::test

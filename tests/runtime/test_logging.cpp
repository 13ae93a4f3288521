#include <doctest/doctest.h>

#include "logging/log.h"
#include "support.h"

using namespace crucible;

TEST_CASE("named loggers write to the rotating file at its level") {
  test::ScratchDir dir("log");
  auto file = dir.path() / "run.log";
  log::Options options;
  options.console_level = log::Level::off;
  options.file_level = log::Level::info;
  options.file = file.string();
  log::init(options);
  log::Logger compiler{"compiler"};
  compiler.info("cache hit for ", 42, " candidates");
  compiler.debug("below the file level");
  log::Logger{"evaluator"}.warn("worker respawned");
  log::flush();
  auto text = test::read_file(file);
  CHECK(text.find("[compiler] cache hit for 42 candidates") != std::string::npos);
  CHECK(text.find("[evaluator] worker respawned") != std::string::npos);
  CHECK(text.find("below the file level") == std::string::npos);
  CHECK(log::parse_level("warn") == log::Level::warn);
  CHECK_FALSE(log::parse_level("loud").has_value());
  log::init({});
}

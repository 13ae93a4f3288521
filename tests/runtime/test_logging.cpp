#include <doctest/doctest.h>

#include "logging/log.h"
#include "run/log_reader.h"
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

TEST_CASE("with a directory, each component also writes its own file, readable at once and parseable") {
  test::ScratchDir dir("log-dir");
  auto logs = dir.path() / "logs";
  auto rotating = dir.path() / "all.log";
  log::Options options;
  options.console_level = log::Level::off;
  options.file_level = log::Level::info;
  options.file = rotating.string();
  options.directory = logs.string();
  log::init(options);
  log::Logger{"coordinator"}.info("step ", 3, " committed");
  log::Logger{"coordinator"}.debug("below the file level");
  log::Logger{"evaluator/0"}.error("worker crashed");
  log::Logger quiet{"silent"};

  // No log::flush(): every line is flushed as it is written, so a follower or a post-mortem sees it.
  auto coordinator = test::read_file(logs / "coordinator.log");
  CHECK(coordinator.find("[coordinator] step 3 committed\n") != std::string::npos);
  CHECK(coordinator.find("below the file level") == std::string::npos);
  CHECK(coordinator.find("worker crashed") == std::string::npos);  // only its own component
  CHECK(coordinator.find('\x1b') == std::string::npos);            // no colour codes in files
  CHECK(log::component_file_name("evaluator/0") == "evaluator_0.log");
  auto evaluator = test::read_file(logs / "evaluator_0.log");
  CHECK(evaluator.find("[evaluator/0] worker crashed") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(logs / "silent.log"));  // created on the first line only

  auto entries = run::read_logs(logs, {});
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].actor == "coordinator");
  CHECK(entries[0].level == log::Level::info);
  CHECK(entries[1].level == log::Level::error);

  log::flush();  // the single rotating file keeps working beside the per-component files
  auto all = test::read_file(rotating);
  CHECK(all.find("[coordinator] step 3 committed") != std::string::npos);
  CHECK(all.find("[evaluator/0] worker crashed") != std::string::npos);

  // A second init without a directory stops the per-component files.
  log::Options without_directory;
  without_directory.console_level = log::Level::off;
  log::init(without_directory);
  log::Logger{"coordinator"}.error("after the directory was dropped");
  CHECK(test::read_file(logs / "coordinator.log").find("dropped") == std::string::npos);
  log::init({});
}

TEST_CASE("an evaluator node's lines carry its name and reach the forward hook, as files would show them") {
  test::ScratchDir dir("log-node");
  std::vector<std::pair<std::string, std::string>> shipped;
  log::Options options;
  options.console_level = log::Level::off;
  options.file_level = log::Level::info;
  options.directory = (dir.path() / "logs").string();
  options.node = "gpu-a";
  options.forward = [&](const std::string& component, const std::string& line) { shipped.emplace_back(component, line); };
  log::init(options);
  log::Logger{"evaluator.cuda:0"}.info("candidate ", 7, ": correct");
  log::Logger{"evaluator.cuda:0"}.debug("below the file level");
  log::init({});
  REQUIRE(shipped.size() == 1);
  CHECK(shipped[0].first == "evaluator.cuda:0");
  CHECK(shipped[0].second.find("[gpu-a/evaluator.cuda:0] candidate 7: correct") != std::string::npos);
  CHECK(shipped[0].second.back() != '\n');
  auto parsed = run::parse_log_line(shipped[0].second, "evaluator.cuda_0");
  REQUIRE(parsed.has_value());
  CHECK(parsed->level == log::Level::info);
  CHECK(test::read_file(dir.path() / "logs" / "evaluator.cuda_0.log").find("[gpu-a/evaluator.cuda:0]") != std::string::npos);
}

#include <doctest/doctest.h>

#include <set>
#include <tuple>

#include "config/toml_reader.h"
#include "crucible/eval/evaluator.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;
using config::ConfigError;

namespace {

// A valid task to break in small ways.
const std::string kTask = R"TOML(name = "tiny"
level = 1
family = "elementwise"
description = "d"
reference = "relu"
reference_source = "torch.relu(x)"

[[inputs]]
name = "x"
dtype = "float32"
shape = ["M"]
init = { dist = "normal" }

[[outputs]]
name = "y"
dtype = "float32"
shape = ["M"]

[tolerance]
float32 = { atol = 1e-5, rtol = 1e-5 }

[sizes.cpu]
M = 16
)TOML";

ConfigError load_error(const std::string& text) {
  test::ScratchDir dir("task");
  auto path = dir.path() / "task.toml";
  test::write_file(path, text);
  try {
    tasks::load_task_file(path);
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError");
  return ConfigError("", 0, "", "");
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("at least 14 shipped level-1 tasks load and cover KernelBench level 1's families") {
  std::set<std::string> families;
  int count = 0;
  for (const auto& file : tasks::task_files(test::tasks_dir())) {
    auto t = tasks::load_task_file(file);
    if (t.name == "trimul") continue;  // GPU MODE's problem, not KernelBench's: level 3 by its size
    families.insert(t.family);
    CHECK(t.level == 1);
    CHECK(t.sizes.count("cpu") == 1);
    CHECK(t.sizes.count("cuda") == 1);
    ++count;
  }
  CHECK(count >= 14);
  for (const char* f : {"elementwise", "softmax", "norm", "reduction", "matmul", "matvec", "convolution", "pooling",
                        "scan", "loss"})
    CHECK_MESSAGE(families.count(f) == 1, "missing family ", f);
}

TEST_CASE("the five pinned tasks keep their exact inputs and outputs") {
  auto names = [](const std::vector<eval::TensorSpec>& ts) {
    std::vector<std::string> out;
    for (const auto& t : ts) out.push_back(t.name + ":" + std::string(eval::dtype_name(t.dtype)) + ":" +
                                           std::to_string(t.shape.size()));
    return out;
  };
  auto dir = test::tasks_dir();
  CHECK(names(tasks::find_task("relu", dir).inputs) == std::vector<std::string>{"x:float32:2"});
  CHECK(names(tasks::find_task("softmax", dir).inputs) == std::vector<std::string>{"x:float32:2"});
  CHECK(names(tasks::find_task("matmul", dir).inputs) == std::vector<std::string>{"a:float32:2", "b:float32:2"});
  auto ln = tasks::find_task("layernorm", dir);
  CHECK(names(ln.inputs) == std::vector<std::string>{"x:float32:2", "weight:float32:1", "bias:float32:1"});
  CHECK(ln.params.at("eps") == doctest::Approx(1e-5));
  auto conv = tasks::find_task("conv2d", dir);
  CHECK(names(conv.inputs) == std::vector<std::string>{"x:float32:4", "weight:float32:4"});
  CHECK(conv.inputs[1].shape[2] == "3");
  CHECK(conv.inputs[1].shape[3] == "3");
}

TEST_CASE("a task's integers are range-checked before they are narrowed to an int") {
  // 2^32 + 1 became 1 in an int, and passed the 0-100 check of min_correctness_trials.
  for (const auto& [from, to, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"level = 1", "level = 4294967297", "level"},
           {"level = 1", "level = 1\nmin_correctness_trials = 4294967297", "min_correctness_trials"}}) {
    CAPTURE(to);
    const auto e = load_error(replace(kTask, from, to));
    CHECK(e.key() == key);
    CHECK(std::string(e.what()).find("got 4294967297") != std::string::npos);
  }
}

TEST_CASE("config errors name the file, the line and the key") {
  SUBCASE("unknown key") {
    auto e = load_error(replace(kTask, "level = 1", "level = 1\nlevle = 2"));
    CHECK(e.key() == "levle");
    CHECK(e.line() == 3);
    CHECK(std::string(e.what()).find("task.toml:3: key 'levle': unknown key") != std::string::npos);
  }
  SUBCASE("wrong type") {
    auto e = load_error(replace(kTask, "level = 1", "level = \"one\""));
    CHECK(e.key() == "level");
    CHECK(e.line() == 2);
    CHECK(std::string(e.what()).find("expected an integer, got string") != std::string::npos);
  }
  SUBCASE("missing required key") {
    auto e = load_error(replace(kTask, "family = \"elementwise\"\n", ""));
    CHECK(e.key() == "family");
  }
  SUBCASE("nested key in an array of tables") {
    auto e = load_error(replace(kTask, "dtype = \"float32\"\nshape = [\"M\"]\ninit", "dtype = \"float31\"\nshape = [\"M\"]\ninit"));
    CHECK(e.key() == "inputs[0].dtype");
    CHECK(e.line() == 10);
  }
  SUBCASE("unknown key inside an inline table") {
    auto e = load_error(replace(kTask, "{ dist = \"normal\" }", "{ dist = \"normal\", sdt = 2 }"));
    CHECK(e.key() == "inputs[0].init.sdt");
  }
  SUBCASE("size symbol missing from a backend") {
    auto e = load_error(replace(kTask, "shape = [\"M\"]\n\n[tolerance]", "shape = [\"Q\"]\n\n[tolerance]"));
    CHECK(e.key() == "outputs[0].shape");
  }
  SUBCASE("scale on an integer input") {
    auto e = load_error(replace(kTask, "dtype = \"float32\"\nshape = [\"M\"]\ninit = { dist = \"normal\" }",
                                "dtype = \"int64\"\nshape = [\"M\"]\ninit = { dist = \"randint\", high = 5, scale = [1, 2] }"));
    CHECK(e.key() == "inputs[0].init.scale");
  }
  SUBCASE("randint bound naming an unknown size") {
    auto e = load_error(replace(kTask, "dtype = \"float32\"\nshape = [\"M\"]\ninit = { dist = \"normal\" }",
                                "dtype = \"int64\"\nshape = [\"M\"]\ninit = { dist = \"randint\", high = \"C\" }"));
    CHECK(e.key() == "inputs[0].init");
  }
  SUBCASE("a dimension literal too large for 64 bits") {
    auto e = load_error(replace(kTask, "shape = [\"M\"]\ninit", "shape = [\"99999999999999999999\"]\ninit"));
    CHECK(e.key() == "inputs[0].shape");
  }
  SUBCASE("unknown reference") {
    auto e = load_error(replace(kTask, "reference = \"relu\"", "reference = \"rleu\""));
    CHECK(e.key() == "reference");
  }
  SUBCASE("TOML syntax error") {
    auto e = load_error(replace(kTask, "level = 1", "level = = 1"));
    CHECK(e.line() == 2);
    CHECK(std::string(e.what()).find("syntax error") != std::string::npos);
  }
  SUBCASE("missing file") {
    CHECK_THROWS_AS(tasks::load_task_file("/nonexistent/task.toml"), ConfigError);
  }
}

TEST_CASE("input distributions and transforms: what loads and what is refused, with the key") {
  struct Row {
    const char* dtype;
    const char* shape;
    const char* init;
    const char* error_key;  // nullptr: loads
  };
  const Row rows[] = {
      {"float32", "[\"M\", \"M\"]", "{ dist = \"uniform\", transform = \"triu\" }", nullptr},
      {"float32", "[\"M\", \"M\"]", "{ dist = \"uniform\", transform = \"tril\" }", nullptr},
      {"float32", "[\"M\", \"M\"]", "{ dist = \"normal\", transform = \"symmetric\" }", nullptr},
      {"float32", "[\"M\", \"M\"]", "{ dist = \"uniform\", scale = [0.001, 1.0], transform = \"softmax\" }", nullptr},
      {"float32", "[\"M\"]", "{ dist = \"choice\", values = [-1.0, 1.0] }", nullptr},
      {"float32", "[\"M\"]", "{ dist = \"uniform\", transform = \"triu\" }", "inputs[0].init.transform"},
      {"float32", "[\"M\", \"3\"]", "{ dist = \"uniform\", transform = \"symmetric\" }", "inputs[0].init.transform"},
      {"int64", "[\"M\", \"M\"]", "{ dist = \"randint\", high = 4, transform = \"softmax\" }", "inputs[0].init.transform"},
      {"float32", "[\"M\", \"M\"]", "{ dist = \"uniform\", transform = \"cumsum\" }", "inputs[0].init.transform"},
      {"float32", "[\"M\"]", "{ dist = \"choice\", values = [-1.0, 0.0, 1.0] }", "inputs[0].init.values"},
      {"float32", "[\"M\"]", "{ dist = \"choice\", values = [1.0, 1.0] }", "inputs[0].init.values"},
      {"int64", "[\"M\"]", "{ dist = \"choice\", values = [0.0, 1.0] }", "inputs[0].init.dist"},
  };
  for (const auto& row : rows) {
    const std::string init = row.init, shape = row.shape;
    CAPTURE(init);
    CAPTURE(shape);
    const std::string text = replace(kTask, "dtype = \"float32\"\nshape = [\"M\"]\ninit = { dist = \"normal\" }",
                                     std::string("dtype = \"") + row.dtype + "\"\nshape = " + row.shape + "\ninit = " + row.init);
    if (row.error_key == nullptr) {
      test::ScratchDir dir("task");
      test::write_file(dir.path() / "task.toml", text);
      CHECK_NOTHROW(tasks::load_task_file(dir.path() / "task.toml"));
    } else {
      CHECK(load_error(text).key() == std::string(row.error_key));
    }
  }
}

TEST_CASE("a task whose outputs sit at zero is refused instead of rewarding constant outputs") {
  test::ScratchDir dir("degenerate");
  auto path = dir.path() / "tiny_mean.toml";
  std::string text = replace(kTask, "reference = \"relu\"", "reference = \"row_mean\"");
  text = replace(text, "{ dist = \"normal\" }", "{ dist = \"normal\", std = 1e-7 }");
  text = replace(text, "shape = [\"M\"]\n\n[tolerance]", "shape = []\n\n[tolerance]");
  test::write_file(path, text);
  auto task = tasks::load_task_file(path);
  eval::EvaluatorConfig config;
  config.cache_dir = dir.path() / "cache";
  eval::Evaluator evaluator(config);
  const char* zero = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor*, int32_t, crucible_tensor* out, int32_t, void*) {
  *(float*)out[0].data = 0.0f; return 0; })";
  CHECK_THROWS_AS(evaluator.evaluate(task, zero, {}), eval::TaskError);
}

TEST_CASE("a task whose draws all give one answer within tolerance is refused, and a constant kernel is not rewarded") {
  test::ScratchDir dir("fixed-answer");
  auto path = dir.path() / "flat_mean.toml";
  std::string text = replace(kTask, "reference = \"relu\"", "reference = \"row_mean\"");
  text = replace(text, "{ dist = \"normal\" }", "{ dist = \"normal\", mean = 1.0, std = 1e-7 }");
  text = replace(text, "shape = [\"M\"]\n\n[tolerance]", "shape = []\n\n[tolerance]");
  test::write_file(path, text);
  auto task = tasks::load_task_file(path);
  eval::EvaluatorConfig config;
  config.cache_dir = dir.path() / "cache";
  eval::Evaluator evaluator(config);
  const char* one = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor*, int32_t, crucible_tensor* out, int32_t, void*) {
  *(float*)out[0].data = 1.0f; return 0; })";
  try {
    evaluator.evaluate(task, one, {});
    FAIL("expected a TaskError");
  } catch (const eval::TaskError& e) {
    CHECK(std::string(e.what()).find("first trial's answer passes every other trial") != std::string::npos);
  }
}

// An imported task's reference is a TorchScript program traced at the task's sizes, and a module's parameter is an
// input of the candidate drawn like any other (tests/fixtures/torchscript, made by its make_fixtures.py).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "config/toml_reader.h"
#include "crucible/eval/evaluator.h"
#include "eval_support.h"
#include "tasks/task_loader.h"
#include "eager_reference.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = test::source_dir() / "tests" / "fixtures" / "torchscript" / "bias_relu.toml";

// relu(x + bias) over [M, N] with bias [N]; `with_bias = false` writes relu(x), as if the parameter were ignored.
std::string bias_relu(bool with_bias) {
  return std::string(R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* bias = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t m = in[0].shape[0], n = in[0].shape[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float v = x[i * n + j] + )") +
         (with_bias ? "bias[j]" : "0.0f * bias[j]") + R"(;
      y[i * n + j] = v > 0.0f ? v : 0.0f;
    }
  return 0;
}
)";
}

eval::EvalOptions quick() {
  eval::EvalOptions o;
  o.timing_trials = 3;
  return o;
}

}  // namespace

TEST_CASE("a TorchScript reference judges candidates, with the module's parameter as an input") {
  test::TestEvaluator t("torchscript");
  const auto task = tasks::load_task_file(kFixture);
  CHECK(task.reference == "torchscript");
  REQUIRE(task.reference_files.count("cpu"));
  CHECK(fs::path(task.reference_files.at("cpu")).is_absolute());
  CHECK(task.origin.at("problem") == "test/1_BiasRelu.py");
  CHECK(task.origin.at("id") == "1");

  const auto good = t.evaluator.evaluate(task, bias_relu(true), quick());
  INFO(test::detail_of(good));
  CHECK(good.status == eval::Status::correct);
  CHECK(good.speedup.has_value());

  const auto no_bias = t.evaluator.evaluate(task, bias_relu(false), quick());
  INFO(test::detail_of(no_bias));
  CHECK(no_bias.status == eval::Status::incorrect);

  const auto zeros = t.evaluator.evaluate(task, R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor*, int32_t, crucible_tensor* out, int32_t, void*) {
  float* y = static_cast<float*>(out[0].data);
  for (int64_t i = 0; i < out[0].shape[0] * out[0].shape[1]; ++i) y[i] = 0.0f;
  return 0;
}
)", quick());
  INFO(test::detail_of(zeros));
  CHECK(zeros.status != eval::Status::correct);
}

TEST_CASE("a size set without its TorchScript file, or a missing file, is a clear task error") {
  test::TestEvaluator t("torchscript-missing");
  const auto task = tasks::load_task_file(kFixture);
  auto at_cuda_sizes = quick();
  at_cuda_sizes.sizes = "cuda";  // declared, but traced for the CPU only
  CHECK_THROWS_WITH_AS(t.evaluator.evaluate(task, bias_relu(true), at_cuda_sizes),
                       doctest::Contains("no TorchScript reference for its 'cuda' sizes"), eval::TaskError);

  test::ScratchDir dir("torchscript-task");
  std::string text = test::read_file(kFixture);
  const std::string file = "cpu = \"bias_relu.pt\"";
  text.replace(text.find(file), file.size(), "cpu = \"missing.pt\"");
  test::write_file(dir.path() / "task.toml", text);
  try {
    tasks::load_task_file(dir.path() / "task.toml");
    FAIL("loaded a task whose reference file does not exist");
  } catch (const config::ConfigError& e) {
    CHECK(e.key() == "reference_files.cpu");
    CHECK(std::string(e.what()).find("missing.pt") != std::string::npos);
  }
}

TEST_CASE("a reference whose output is not the declared shape is a task error naming the file and both shapes") {
  test::ScratchDir dir("torchscript-shape");
  std::string text = test::read_file(kFixture);
  const std::string out_shape = "name = \"out\"\ndtype = \"float32\"\nshape = [\"M\", \"N\"]";
  REQUIRE(text.find(out_shape) != std::string::npos);
  text.replace(text.find(out_shape), out_shape.size(), "name = \"out\"\ndtype = \"float32\"\nshape = [\"N\", \"M\"]");
  fs::copy_file(kFixture.parent_path() / "bias_relu.pt", dir.path() / "bias_relu.pt");
  test::write_file(dir.path() / "task.toml", text);
  const auto task = tasks::load_task_file(dir.path() / "task.toml");
  test::TestEvaluator t("torchscript-shape");
  try {
    t.evaluator.evaluate(task, bias_relu(true), quick());
    FAIL("a reference of the wrong shape was trusted");
  } catch (const eval::TaskError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find((dir.path() / "task.toml").string()) != std::string::npos);
    CHECK(what.find("float32, but the task declares [") != std::string::npos);
  }
}

TEST_CASE("a constant distribution gives every element its value, for norms' weights and buffers") {
  test::ScratchDir dir("torchscript-constant");
  std::string text = test::read_file(kFixture);
  const std::string uniform = "init = { dist = \"uniform\", low = -0.5, high = 0.5 }";
  text.replace(text.find(uniform), uniform.size(), "init = { dist = \"constant\", value = 0.25 }");
  fs::copy_file(kFixture.parent_path() / "bias_relu.pt", dir.path() / "bias_relu.pt");
  test::write_file(dir.path() / "task.toml", text);
  const auto task = tasks::load_task_file(dir.path() / "task.toml");
  REQUIRE(task.inputs.size() == 2);
  CHECK(task.inputs[1].init.kind == eval::InitSpec::Kind::constant);
  CHECK(task.inputs[1].init.mean == 0.25);
  // A candidate that adds the constant instead of reading the input is right only because the input is constant.
  test::TestEvaluator t("torchscript-constant");
  std::string fixed = bias_relu(true);
  fixed.replace(fixed.find("bias[j]"), 7, "0.25f");
  const auto v = t.evaluator.evaluate(task, fixed, quick());
  INFO(test::detail_of(v));
  CHECK(v.status == eval::Status::correct);
}

TEST_CASE("a traced reference runs as eager PyTorch: convolutions in true float32, numbers as host scalars") {
  // make_fixtures.py: conv_relu traced with PyTorch's default TF32 switch (on); softsign's `1 + |x|` keeps the 1 as
  // a 0-dim constant, on the host when loaded there (its GPU half is in test_kernelbench_gpu.cpp); scalars holds
  // constants some of whose uses cannot take a host tensor; bias_relu has neither.
  const auto dir = test::source_dir() / "tests" / "fixtures" / "torchscript";
  const auto conv = eval::eager_rewrites_of((dir / "conv_relu.pt").string(), "cpu");
  CHECK(conv.first.tf32_convolutions == 1);
  CHECK(conv.second.tf32_convolutions == 0);
  const auto softsign = eval::eager_rewrites_of((dir / "softsign.pt").string(), "cpu");
  CHECK(softsign.number_constants == 1);
  CHECK(softsign.first.device_scalars == 0);  // already on the host
  CHECK(softsign.first.tf32_convolutions == 0);
  // scalars.pt: `2 * x` and `2 ** x` take their 2 as a number; where's and lerp's 0.5 stays where it is.
  CHECK(eval::eager_rewrites_of((dir / "scalars.pt").string(), "cpu").number_constants == 2);
  CHECK(conv.number_constants == 0);
  const auto none = eval::eager_rewrites_of((dir / "bias_relu.pt").string(), "cpu");
  CHECK(none.first.tf32_convolutions + none.first.device_scalars == 0);
}

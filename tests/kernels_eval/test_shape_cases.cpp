// Tasks scored over several shapes (GPU MODE's TriMul): the verdict is correct only when every shape is, names the
// shape that failed, and times by the geometric mean of the shapes' medians.
#include <doctest/doctest.h>

#include <cmath>

#include "crucible/eval/evaluator.h"
#include "eval_support.h"
#include "tasks/task_loader.h"

using namespace crucible;

namespace {

std::string naive_trimul() {
  return test::read_file(test::source_dir() / "configs" / "candidates" / "cpu" / "trimul.cpp");
}

// The naive candidate with one change, spliced in place of `from`.
std::string changed(const std::string& from, const std::string& to) {
  std::string s = naive_trimul();
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("shape cases: trimul's naive CPU candidate is correct on both CPU shapes, timed by their geometric mean") {
  test::TestEvaluator t("shape-cases");
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  REQUIRE(trimul.cases_for("cpu").size() == 2);
  REQUIRE(trimul.cases_for("cuda").size() == 7);
  auto v = t.evaluator.evaluate(trimul, naive_trimul(), {});
  INFO(test::detail_of(v));
  REQUIRE(v.status == eval::Status::correct);
  CHECK(v.task == "trimul");
  REQUIRE(v.shapes.size() == 2);
  CHECK(v.shapes[0].name == "n32_b1_c32_nomask_normal");
  REQUIRE(v.candidate_time.has_value());
  const double geo = std::sqrt(v.shapes[0].candidate_us * v.shapes[1].candidate_us);
  CHECK(v.candidate_time->median_us == doctest::Approx(geo));
  const double ref = std::sqrt(v.shapes[0].reference_us * v.shapes[1].reference_us);
  REQUIRE(v.speedup.has_value());
  CHECK(*v.speedup == doctest::Approx(ref / geo));
  CHECK(v.trials.size() >= 4);  // every shape's trials
}

TEST_CASE("shape cases: a candidate wrong on one shape only is incorrect, and the verdict names that shape") {
  test::TestEvaluator t("shape-cases-wrong");
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  // Ignoring the mask passes the first shape (its mask is all ones) and fails the second (a random 0/1 mask).
  auto v = t.evaluator.evaluate(trimul, changed("* mask[r] *", "*"), {});
  INFO(test::detail_of(v));
  CHECK(v.status == eval::Status::incorrect);
  CHECK(v.task == "trimul");
  CHECK(test::detail_of(v).find("shape n24_b2_c16_mask_cauchy") != std::string::npos);
  auto zeros = t.evaluator.evaluate(trimul, changed("for (int64_t c = 0; c < C; ++c) y[r * C + c] = dot(g, to_out + c * H, H);",
                                                    "for (int64_t c = 0; c < C; ++c) y[r * C + c] = 0.0f;"), {});
  CHECK(zeros.status == eval::Status::incorrect);
  CHECK(test::detail_of(zeros).find("shape n32_b1_c32_nomask_normal") != std::string::npos);
}

TEST_CASE("shape cases: the loader reads Cauchy inputs and per-shape distributions, and refuses unknown inputs") {
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  const auto& second = trimul.cases_for("cpu")[1];
  REQUIRE(second.inits.count("x") == 1);
  CHECK(second.inits.at("x").kind == eval::InitSpec::Kind::cauchy);
  CHECK(second.inits.at("x").std == 2.0);
  auto at = trimul.at_case(second, "cpu");
  CHECK(at.name == "trimul@n24_b2_c16_mask_cauchy");
  CHECK(at.sizes.at("cpu").at("B") == 2);
  CHECK(at.inputs[0].init.kind == eval::InitSpec::Kind::cauchy);
  CHECK(at.cases_for("cpu").empty());

  const std::string base = R"(name = "t"
level = 1
family = "f"
description = "d"
reference = "relu"
reference_source = "x"
[[inputs]]
name = "x"
dtype = "float32"
shape = ["N"]
[[outputs]]
name = "y"
dtype = "float32"
shape = ["N"]
[tolerance]
float32 = { atol = 1e-6, rtol = 1e-6 }
[sizes.cpu]
N = 8
)";
  CHECK_THROWS_WITH(tasks::parse_task_text(base + "[[shapes.cpu]]\nname = \"a\"\nsizes = { N = 4 }\ninit = { z = { dist = \"normal\" } }\n", "t.toml"),
                    doctest::Contains("no input of this name"));
  CHECK_THROWS_WITH(tasks::parse_task_text(base + "[[shapes.cuda]]\nname = \"a\"\nsizes = { N = 4 }\n", "t.toml"),
                    doctest::Contains("no [sizes.cuda]"));
  CHECK_THROWS_WITH(tasks::parse_task_text(base + "[[shapes.cpu]]\nname = \"a\"\nsizes = { M = 4 }\n", "t.toml"),
                    doctest::Contains("unknown size symbol"));
  CHECK_THROWS_WITH(tasks::parse_task_text(base + "[[shapes.cpu]]\nname = \"a\"\nsizes = { N = 4 }\ninit = { x = { dist = \"cauchy\", gamma = -1 } }\n", "t.toml"),
                    doctest::Contains("gamma"));
  auto ok = tasks::parse_task_text(base + "[[shapes.cpu]]\nname = \"a\"\nsizes = { N = 4 }\n", "t.toml");
  CHECK(ok.cases_for("cpu").size() == 1);
}

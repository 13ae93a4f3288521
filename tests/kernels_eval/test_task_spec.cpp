#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "crucible/eval/task_spec.h"
#include "crucible/eval/verdict.h"
#include "crucible/eval/verdict_json.h"

using namespace crucible::eval;

TEST_CASE("shapes and product expressions resolve against a backend's sizes") {
  Sizes sizes{{"M", 4}, {"N", 8}};
  TensorSpec t{"x", DType::float32, {"M", "N", "3"}, {}};
  CHECK(resolve_shape(t, sizes) == std::vector<int64_t>{4, 8, 3});
  CHECK(evaluate_product("2*M*N", sizes) == doctest::Approx(64));
  CHECK(evaluate_product("", sizes) == 0);
  CHECK_THROWS_AS(resolve_shape(TensorSpec{"y", DType::float32, {"Q"}, {}}, sizes), std::invalid_argument);
  CHECK_THROWS_AS(evaluate_product("2**M", sizes), std::invalid_argument);
  CHECK(contiguous_strides({2, 3, 4}) == std::vector<int64_t>{12, 4, 1});
  CHECK(numel({}) == 1);
}

TEST_CASE("timing statistics: median, spread and coefficient of variation") {
  auto s = summarize_times({5, 1, 3, 2, 4});
  CHECK(s.trials == 5);
  CHECK(s.median_us == 3);
  CHECK(s.min_us == 1);
  CHECK(s.max_us == 5);
  CHECK(s.mean_us == 3);
  CHECK(s.cv == doctest::Approx(std::sqrt(2.5) / 3));
  CHECK(summarize_times({1, 2, 3, 4}).median_us == 2.5);
  CHECK(summarize_times({}).trials == 0);
}

TEST_CASE("a verdict serialises to JSON with its status first and its reasons") {
  Verdict v;
  v.status = Status::incorrect;
  v.task = "relu";
  v.reasons.push_back({ReasonCode::input_mutated, "trial 0: \"x\" changed"});
  auto text = to_json(v, -1);
  CHECK(text.rfind("{\"status\":\"incorrect\"", 0) == 0);
  CHECK(text.find("\"code\":\"input_mutated\"") != std::string::npos);
  CHECK(text.find("\"speedup\":null") != std::string::npos);
}

TEST_CASE("dtype names round-trip and match the C contract's values") {
  for (int i = 0; i <= 6; ++i) {
    auto d = static_cast<DType>(i);
    CHECK(parse_dtype(dtype_name(d)) == d);
  }
  CHECK(static_cast<int>(DType::bfloat16) == 2);
  CHECK(static_cast<int>(DType::boolean) == 6);
  CHECK_FALSE(parse_dtype("float8").has_value());
}

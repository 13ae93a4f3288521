// A GPU input pool's fresh inputs: the one-pass reflection gives what LibTorch's where(mask, c - x, x) gave, down to
// the rounding of a half type's centre (a constant input reflects onto itself), and labels stay in their range.
// LibTorch's headers first: the glog they bring defines CHECK too, and doctest's must be the one that stands.
#include <ATen/core/Tensor.h>
#include <doctest/doctest.h>

#include "tensor_checks.h"

using namespace crucible::eval;

namespace {
TensorSpec input(const char* name, DType dtype, InitSpec init) {
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {"N"};
  t.init = init;
  return t;
}
}  // namespace

TEST_CASE("gpu: fresh inputs from a GPU pool keep constants constant in half types and labels in range") {
  InitSpec constant;
  constant.kind = InitSpec::Kind::constant;
  constant.mean = 0.1;  // not exact in half or bfloat16: the centre 0.2 must be rounded as the element type first
  InitSpec labels;
  labels.kind = InitSpec::Kind::randint;
  labels.low = 0;
  labels.high = 10;
  InitSpec normal;
  normal.mean = 0.1;
  TaskSpec task;
  task.name = "pool";
  task.inputs = {input("h", DType::float16, constant), input("b", DType::bfloat16, constant),
                 input("f", DType::float32, constant), input("l", DType::int64, labels),
                 input("n", DType::float16, normal)};
  const Sizes sizes{{"N", 100003}};
  InputPool pool(task, sizes, 7, torch::Device("cuda:0"));
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("input " << task.inputs[i].name << ", seed " << seed);
      const torch::Tensor t = pool.fresh(i, seed).cpu();
      const torch::Tensor want = torch::full({sizes.at("N")}, 0.1, torch::TensorOptions().dtype(t.scalar_type()));
      CHECK(torch::equal(t, want));
    }
    const torch::Tensor l = pool.fresh(3, seed).cpu();
    CHECK(l.min().item<int64_t>() >= 0);
    CHECK(l.max().item<int64_t>() <= 9);
    CHECK(l.eq(9).any().item<bool>());  // reflection reaches the top label (0 -> 9)
    const torch::Tensor n = pool.fresh(4, seed).cpu().to(torch::kFloat32);
    CHECK(torch::isfinite(n).all().item<bool>());
    CHECK(std::abs(n.mean().item<float>() - 0.1f) < 0.02f);  // the reflection keeps the distribution's centre
  }
}

// What a language-model policy shows for a task, and how a reply becomes a candidate source.
#include <doctest/doctest.h>

#include "crucible/eval/task_spec.h"
#include "policy/kernel_prompt.h"
#include "support.h"
#include "tasks/task_loader.h"

using namespace crucible;

TEST_CASE("kernel prompt: the task, its reference, tensors, sizes, the contract and the reply format") {
  const auto task = tasks::load_task_file(test::tasks_dir() / "layernorm.toml");
  const auto header = test::read_file(test::source_dir() / "kernels_eval" / "include" / "crucible" / "kernel.h");
  const auto cpu = policy::kernel_prompt(task, eval::CandidateLanguage::cpp(), header);
  CHECK(cpu.find(task.description) != std::string::npos);
  CHECK(cpu.find(task.reference_source) != std::string::npos);
  for (const auto& t : task.inputs) CHECK(cpu.find("- " + t.name + ": ") != std::string::npos);
  for (const auto& [symbol, value] : task.sizes.at("cpu"))
    CHECK(cpu.find(symbol + "=" + std::to_string(value)) != std::string::npos);
  CHECK(cpu.find("crucible_forward") != std::string::npos);
  CHECK(cpu.find("CRUCIBLE_KERNEL_H") != std::string::npos);  // the whole header
  CHECK(cpu.find("```cpp code block") != std::string::npos);
  const auto cuda = policy::kernel_prompt(task, eval::CandidateLanguage::cuda_cpp(), header);
  CHECK(cuda.find("CUDA C++") != std::string::npos);
  CHECK(cuda.find("```cuda code block") != std::string::npos);
  CHECK(cuda.find("given stream") != std::string::npos);
}

TEST_CASE("kernel prompt: an imported problem's parameters are named as inputs, in order, with the module's mode") {
  const auto task = tasks::load_task_file(test::source_dir() / "tests" / "fixtures" / "torchscript" / "bias_relu.toml");
  const auto prompt = policy::kernel_prompt(task, eval::CandidateLanguage::cpp(), "");
  CHECK(prompt.find("named_parameters() then named_buffers() order") != std::string::npos);
  CHECK(prompt.find("training mode") != std::string::npos);
  CHECK(prompt.find("- x: float32 [M, N]\n- bias: float32 [N]\n") != std::string::npos);
  CHECK(prompt.find("M=64") != std::string::npos);
  const auto shipped =
      policy::kernel_prompt(tasks::load_task_file(test::tasks_dir() / "relu.toml"), eval::CandidateLanguage::cpp(), "");
  CHECK(shipped.find("named_parameters()") == std::string::npos);
}

TEST_CASE("completion parsing: the last complete code block, none when cut off or absent") {
  const auto source = test::read_file(test::source_dir() / "configs" / "candidates" / "cpu" / "relu.cpp");
  const auto code = policy::extract_code("Here is my kernel.\n```cpp\n" + source + "```\nIt is fast.");
  REQUIRE(code);
  CHECK(*code == source);
  CHECK(*policy::extract_code("```cpp\nint a;\n```\nbetter:\n```cuda\nint b;\n```") == "int b;\n");
  CHECK(*policy::extract_code("```python\nx = 1\n```\n```\nint c;\n```") == "int c;\n");
  CHECK(*policy::extract_code("```CPP \r\nint d;\n```") == "int d;\n");
  CHECK_FALSE(policy::extract_code("```python\nprint(1)\n```"));
  CHECK_FALSE(policy::extract_code("I cannot write this kernel."));
  CHECK_FALSE(policy::extract_code("```cpp\nint main() {\n  // the token budget ran out here"));
  CHECK(*policy::extract_code("```cpp\nint e;\n```\n```cpp\nint f; // cut") == "int e;\n");
}

TEST_CASE("kernel prompt: Triton asks for Python in a python block, and a multi-shape task lists its shapes") {
  auto trimul = tasks::find_task("trimul", test::tasks_dir());
  const auto p = policy::kernel_prompt(trimul, eval::CandidateLanguage::triton(), "");
  CHECK(p.find("Write a fast Triton kernel") != std::string::npos);
  CHECK(p.find("def crucible_forward(inputs, outputs)") != std::string::npos);
  CHECK(p.find("```python") != std::string::npos);
  CHECK(p.find("geometric mean") != std::string::npos);
  CHECK(p.find("n1024_b1_c384_nomask_normal") != std::string::npos);
  CHECK(p.find("crucible/kernel.h") == std::string::npos);
  const auto code = policy::extract_code("Here:\n```python\nimport triton\n```\n```cpp\nint a;\n```\n",
                                         eval::CandidateLanguage::triton());
  REQUIRE(code.has_value());
  CHECK(*code == "import triton\n");
  CHECK(policy::fenced_code("x = 1", eval::CandidateLanguage::triton()).rfind("```python\n", 0) == 0);
}

TEST_CASE("kernel prompt: each candidate language has its code fence, and a reply's code is taken in that language") {
  using eval::Backend;
  using eval::CandidateKind;
  using eval::CandidateLanguage;
  const std::string reply = "```python\nimport torch\n```\n```cuda\n__global__ void k() {}\n```\n";
  struct Row {
    CandidateLanguage language;
    std::string fence, code;
  };
  const Row rows[] = {
      {CandidateLanguage::cpp(), "cpp", "__global__ void k() {}\n"},
      {CandidateLanguage::cuda_cpp(), "cuda", "__global__ void k() {}\n"},
      {CandidateLanguage::triton(), "python", "import torch\n"},
      // KernelBench candidates are Python files (a ModelNew class), on the CPU as on a GPU.
      {{Backend::cuda, CandidateKind::kernelbench}, "python", "import torch\n"},
      {{Backend::cpu, CandidateKind::kernelbench}, "python", "import torch\n"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.language.name());
    CHECK(policy::code_fence_tag(row.language) == row.fence);
    CHECK(policy::fenced_code("x", row.language) == "```" + row.fence + "\nx\n```");
    const auto code = policy::extract_code(reply, row.language);
    REQUIRE(code.has_value());
    CHECK(*code == row.code);
  }
}

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/static_gate.h"
#include "support.h"

using namespace crucible;

TEST_CASE("imports are classified by what they would let a candidate do") {
  eval::GatePolicy cpu;
  CHECK(eval::classify_import("memcpy", cpu).empty());
  CHECK(eval::classify_import("expf", cpu).empty());
  CHECK(eval::classify_import("_Znwm", cpu).empty());
  CHECK(eval::classify_import("__cxa_atexit", cpu).empty());
  CHECK(eval::classify_import("fork", cpu) == "process");
  CHECK(eval::classify_import("execve", cpu) == "process");
  CHECK(eval::classify_import("pthread_create", cpu) == "thread");
  CHECK(eval::classify_import("fopen", cpu) == "file");
  CHECK(eval::classify_import("connect", cpu) == "network");
  CHECK(eval::classify_import("dlopen", cpu) == "dynamic loading");
  CHECK(eval::classify_import("clock_gettime", cpu) == "time");
  CHECK(eval::classify_import("sigaction", cpu) == "signal");
  CHECK(eval::classify_import("syscall", cpu) == "raw system call");
  CHECK(eval::classify_import("cblas_sgemm", cpu) == "library");
  CHECK(eval::classify_import("_ZN2at6native4reluERKNS_6TensorE", cpu) == "library");
  CHECK(eval::classify_import("cudnnCreate", cpu) == "library");
  CHECK(eval::classify_import("some_unknown_function", cpu) == "not allowlisted");
  CHECK(eval::classify_import("cudaLaunchKernel", cpu) == "not allowlisted");

  eval::GatePolicy cuda;
  cuda.backend = eval::Backend::cuda;
  CHECK(eval::classify_import("cudaLaunchKernel", cuda).empty());
  CHECK(eval::classify_import("cudaStreamCreate", cuda) == "cuda stream/event/graph");
  // Pinning host memory for the device: the way a candidate could try to write a page its worker maps read-only.
  CHECK(eval::classify_import("cudaHostRegister", cuda) == "cuda stream/event/graph");
  CHECK(eval::classify_import("cublasCreate_v2", cuda) == "library");

  eval::GatePolicy allowing;
  allowing.extra_allowed_imports = {"cblas_sgemm"};
  CHECK(eval::classify_import("cblas_sgemm", allowing).empty());
}

TEST_CASE("the dynamic symbol table of a real build shows the contract's entry point only") {
  test::ScratchDir cache("gate");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  auto built = compiler.compile(test::read_file(test::source_dir() / "configs/candidates/cpu/softmax.cpp"), {});
  REQUIRE(built.ok());
  auto symbols = eval::read_dynamic_symbols(built.so_path);
  CHECK(std::find(symbols.exports.begin(), symbols.exports.end(), "crucible_forward") != symbols.exports.end());
  bool uses_exp = false;
  for (const auto& s : symbols.imports) uses_exp |= s == "exp" || s == "expf";
  CHECK(uses_exp);
  CHECK(eval::check_shared_object(built.so_path, {}).empty());
}

TEST_CASE("malformed or foreign files are refused, not trusted") {
  test::ScratchDir dir("gate-bad");
  auto garbage = dir.path() / "garbage.so";
  test::write_file(garbage, std::string(64, 'x'));
  auto reasons = eval::check_shared_object(garbage, {});
  REQUIRE(reasons.size() == 1);
  CHECK(reasons[0].code == eval::ReasonCode::malformed_binary);

  auto truncated = dir.path() / "truncated.so";
  test::write_file(truncated, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(20, '\0'));
  CHECK(eval::check_shared_object(truncated, {})[0].code == eval::ReasonCode::malformed_binary);

  eval::GatePolicy tiny;
  tiny.max_binary_bytes = 10;
  CHECK(eval::check_shared_object(garbage, tiny)[0].code == eval::ReasonCode::binary_too_large);
}

TEST_CASE("a shared object without crucible_forward is refused") {
  test::ScratchDir cache("gate-entry");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  auto built = compiler.compile("extern \"C\" int other(void) { return 1; }", {});
  REQUIRE(built.ok());
  auto reasons = eval::check_shared_object(built.so_path, {});
  bool missing = false;
  for (const auto& r : reasons) missing |= r.code == eval::ReasonCode::missing_entry_point;
  CHECK(missing);
}

namespace {
bool have_nvcc() { return std::filesystem::exists("/usr/local/cuda/bin/nvcc") || std::getenv("CRUCIBLE_NVCC"); }

std::vector<eval::Reason> gate_cuda_source(eval::Compiler& compiler, const std::string& source) {
  eval::CompileOptions options;
  options.backend = eval::Backend::cuda;
  auto built = compiler.compile(source, options);
  INFO(built.log);
  REQUIRE(built.ok());
  eval::GatePolicy policy;
  policy.backend = eval::Backend::cuda;
  return eval::check_shared_object(built.so_path, policy);
}

std::string joined(const std::vector<eval::Reason>& reasons) {
  std::string all;
  for (const auto& r : reasons) all += std::string(eval::reason_code_name(r.code)) + ": " + r.detail + "; ";
  return all;
}
}  // namespace

TEST_CASE("CUDA hack fixtures are refused by the gate with the category that names them") {
  if (!have_nvcc()) {
    MESSAGE("SKIPPED: no CUDA toolkit (nvcc) on this machine");
    return;
  }
  test::ScratchDir cache("gate-cuda");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  const std::pair<const char*, const char*> expected[] = {{"side_stream", "cuda stream/event/graph"},
                                                          {"device_sync", "cuda stream/event/graph"},
                                                          {"host_thread", "thread"},
                                                          {"cublas_call", "library"}};
  for (const auto& [fixture, category] : expected) {
    auto source = test::read_file(test::source_dir() / "tests/fixtures/cuda" / (std::string(fixture) + ".cu"));
    auto all = joined(gate_cuda_source(compiler, source));
    INFO("fixture ", std::string(fixture), " -> ", all);
    CHECK(all.find(std::string("(") + category + ")") != std::string::npos);
  }
}

TEST_CASE("every task's naive CUDA candidate builds with nvcc and passes the CUDA gate") {
  if (!have_nvcc()) {
    MESSAGE("SKIPPED: no CUDA toolkit (nvcc) on this machine");
    return;
  }
  test::ScratchDir cache("gate-cuda-candidates");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() / "configs/candidates/cuda")) {
    if (entry.path().extension() != ".cu") continue;
    auto reasons = gate_cuda_source(compiler, test::read_file(entry.path()));
    INFO(entry.path().filename().string(), " -> ", joined(reasons));
    CHECK(reasons.empty());
    ++checked;
  }
  CHECK(checked >= 14);
}

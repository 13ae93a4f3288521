// Triton candidates on a machine without a GPU: a clear refusal, the gate run from C++, and the worker protocol's
// Python mirror checked against the native layout, the worker's file confinement (the parts of the Triton path that
// need no GPU).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "crucible/eval/evaluator.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/landlock.h"
#include "crucible/eval/subprocess.h"
#include "eval_support.h"
#include "tasks/task_loader.h"

using namespace crucible;
namespace fs = std::filesystem;

TEST_CASE("triton: a Triton candidate on the CPU is rejected, saying it needs a GPU node") {
  test::TestEvaluator t("triton-cpu");
  auto relu = tasks::find_task("relu", test::tasks_dir());
  eval::EvalOptions options;
  options.kind = eval::CandidateKind::triton;
  auto source = test::read_file(test::source_dir() / "configs" / "candidates" / "triton" / "relu.py");
  auto v = t.evaluator.evaluate(relu, source, options);
  CHECK(v.status == eval::Status::rejected);
  REQUIRE(v.has_reason(eval::ReasonCode::triton_unavailable));
  CHECK(test::detail_of(v).find("GPU") != std::string::npos);
}

TEST_CASE("triton: a compile pool builds nothing ahead for a Triton candidate (its shapes come with its task)") {
  test::TestEvaluator t("triton-compile-ahead");
  eval::EvalOptions options;
  options.kind = eval::CandidateKind::triton;
  auto r = t.evaluator.compile("import triton\n", options);
  CHECK(r.ok());
  CHECK(r.so_path.empty());
  CHECK(r.seconds == 0.0);
  CHECK(r.log.find("Triton") != std::string::npos);
}

TEST_CASE("triton: candidate kinds parse, and unknown ones are refused by name") {
  CHECK(eval::parse_candidate_kind("triton") == eval::CandidateKind::triton);
  CHECK(eval::parse_candidate_kind("native") == eval::CandidateKind::native);
  CHECK(eval::candidate_kind_name(eval::CandidateKind::triton) == "triton");
  CHECK_THROWS_WITH_AS(eval::parse_candidate_kind("cuda"), doctest::Contains("'cuda'"), std::invalid_argument);
}

TEST_CASE("triton: the gate runs from C++ and returns the refusals of a hostile source") {
  std::string error;
  auto refusals = eval::triton_gate("/usr/bin/python3",
                                    test::read_file(test::source_dir() / "tests/fixtures/triton/side_stream.py"),
                                    {eval::DType::float32}, error);
  REQUIRE(error.empty());
  REQUIRE_FALSE(refusals.empty());
  CHECK(refusals[0].code == eval::ReasonCode::side_stream);
  auto none = eval::triton_gate("/usr/bin/python3",
                                test::read_file(test::source_dir() / "configs/candidates/triton/softmax.py"),
                                {eval::DType::float32}, error);
  CHECK(error.empty());
  CHECK(none.empty());
}

TEST_CASE("triton: the worker's Python mirror of the protocol matches the native layout") {
  const std::string script = "import ctypes, sys\nsys.path.insert(0, sys.argv[1])\nfrom crucible_triton import protocol\n"
                             "lib = ctypes.CDLL(sys.argv[2])\nsys.exit(0 if protocol.layout() == protocol.native_layout(lib) "
                             "else 1)\n";
  eval::ProcessLimits limits;
  auto r = eval::run_process({"/usr/bin/python3", "-I", "-c", script, eval::default_python_dir().string(),
                              eval::default_python_worker_support().string()},
                             limits);
  INFO(r.output);
  CHECK(r.ok());
}

TEST_CASE("triton: the worker's file confinement keeps the Python's trees and the candidate's build readable, and "
          "closes the rest") {
  if (eval::landlock_abi() == 0) {
    MESSAGE("skipped: this kernel has no Landlock (the Triton worker then runs on its seccomp filters alone)");
    return;
  }
  test::ScratchDir scratch("triton-confine");
  const fs::path candidate = scratch.path() / "triton" / "abc";
  fs::create_directories(candidate);
  fs::create_directories(scratch.path() / "triton" / "other");
  std::ofstream(candidate / "candidate.py") << "x = 1\n";
  std::ofstream(scratch.path() / "triton" / "other" / "candidate.py") << "y = 2\n";
  // Each probe prints "<name> yes" or "<name> no": what the candidate's module code could do after confinement.
  const std::string script =
      "import ctypes, os, sys\nsys.path.insert(0, sys.argv[1])\nfrom crucible_triton import confine\n"
      "why = confine.confine(ctypes.CDLL(sys.argv[2]), confine.worker_paths(sys.argv[1], sys.argv[3], ''))\n"
      "print('confined', 'no' if why else 'yes', why)\n"
      "def probe(name, act):\n"
      "    try:\n        act()\n        print(name, 'yes')\n"
      "    except Exception as e:\n        print(name, 'no', type(e).__name__)\n"
      "probe('own_source', lambda: open(os.path.join(sys.argv[3], 'candidate.py')).read())\n"
      "probe('lazy_import', lambda: __import__('fractions'))\n"
      "probe('own_proc', lambda: open('/proc/self/status').read())\n"
      "probe('another_build', lambda: open(sys.argv[4]).read())\n"
      "probe('etc', lambda: open('/etc/passwd').read())\n"
      "probe('other_proc', lambda: open('/proc/1/environ', 'rb').read())\n"
      "probe('write_own_build', lambda: open(os.path.join(sys.argv[3], 'new.py'), 'w').write('z'))\n";
  eval::ProcessLimits limits;
  limits.wall_seconds = 30.0;
  auto r = eval::run_process({"/usr/bin/python3", "-I", "-c", script, eval::default_python_dir().string(),
                              eval::default_python_worker_support().string(), candidate.string(),
                              (scratch.path() / "triton" / "other" / "candidate.py").string()},
                             limits);
  INFO(r.output);
  REQUIRE(r.ok());
  const std::pair<const char*, bool> expected[] = {
      {"confined", true},      {"own_source", true}, {"lazy_import", true},     {"own_proc", true},
      {"another_build", false}, {"etc", false},       {"other_proc", false},     {"write_own_build", false}};
  for (const auto& [name, allowed] : expected) {
    INFO(name);
    CHECK(r.output.find(std::string(name) + (allowed ? " yes" : " no")) != std::string::npos);
  }
  CHECK_FALSE(fs::exists(candidate / "new.py"));
}

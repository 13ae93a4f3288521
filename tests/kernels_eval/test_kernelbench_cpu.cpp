// KernelBench-format candidates (ModelNew with load_inline(cpp_sources=...)) on the CPU: the gate and the static
// extraction of load_inline's sources by tables, the extension symbol gate, and whole evaluations on KernelBench
// problems imported from ../shared/kernelbench (skipped, saying so, where it or Debian's PyTorch is absent).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "cli_support.h"
#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/static_gate.h"
#include "crucible/eval/subprocess.h"
#include "eval_support.h"
#include "kernelbench/extension_headers.h"
#include "tasks/task_loader.h"

using namespace crucible;
namespace fs = std::filesystem;

namespace {

const std::string kPython = "/usr/bin/python3";

bool python_has_torch() {
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  return eval::run_process({kPython, "-c", "import torch"}, limits).ok();
}

fs::path shared_kernelbench() {
  if (const char* env = std::getenv("CRUCIBLE_KERNELBENCH_DIR")) return env;
  return test::source_dir().parent_path() / "shared" / "kernelbench";
}

using C = eval::ReasonCode;

std::vector<std::string> codes_of(const std::vector<eval::Reason>& reasons) {
  std::vector<std::string> codes;
  for (const auto& r : reasons) codes.push_back(std::string(eval::reason_code_name(r.code)) + ": " + r.detail);
  return codes;
}

bool has_code(const std::vector<eval::Reason>& reasons, eval::ReasonCode code) {
  for (const auto& r : reasons)
    if (r.code == code) return true;
  return false;
}

// A ModelNew around one forward body, with an extension built from `cpp` (load_inline at module level).
std::string model_new(const std::string& forward, const std::string& extra = "", const std::string& init = "") {
  return "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n" + extra +
         "\nsrc = \"torch::Tensor f(torch::Tensor x) { return x; }\"\n"
         "ext = load_inline(name=\"ext\", cpp_sources=src, functions=[\"f\"])\n\n"
         "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.ext = ext\n" +
         init + "\n    def forward(self, x):\n" + forward;
}

std::vector<eval::Reason> analyze(const std::string& source, bool forbid_torch_ops = false,
                                  std::vector<std::pair<std::string, std::string>>* units = nullptr) {
  eval::KernelBenchBuildOptions options;
  options.dtypes = {eval::DType::float32};
  options.forbid_torch_ops = forbid_torch_ops;
  std::string error;
  auto refusals = eval::kernelbench_analyze(kPython, source, options, units, error);
  INFO(error);
  CHECK(error.empty());
  return refusals;
}

}  // namespace

TEST_CASE("kernelbench: the gate refuses each known hack by its code, and lets honest answers through") {
  struct Row {
    const char* what;
    std::string source;
    std::optional<eval::ReasonCode> code;  // none: the candidate passes
    bool forbid = false;
  };
  const std::vector<Row> rows{
      {"honest", model_new("        return self.ext.f(x)\n"), std::nullopt},
      {"no_grad block", model_new("        with torch.no_grad():\n            return self.ext.f(x)\n"), std::nullopt},
      {"a submodule's weight set in __init__",
       model_new("        return self.ext.f(self.lin(x))\n", "",
                 "        self.lin = nn.Linear(4, 4)\n        self.lin.weight = nn.Parameter(torch.ones(4, 4))\n"),
       std::nullopt},
      {"a PyTorch op kept (allowed by default)", model_new("        return self.ext.f(torch.relu(x))\n"), std::nullopt},
      {"a PyTorch op with torch_ops = forbid", model_new("        return self.ext.f(torch.relu(x))\n"),
       C::torch_compute, true},
      {"F.* with torch_ops = forbid", model_new("        return torch.nn.functional.gelu(self.ext.f(x))\n"),
       C::torch_compute, true},
      {"try/except fallback",
       model_new("        try:\n            return self.ext.f(x)\n        except Exception:\n            return x\n"),
       C::exception_fallback},
      {"threads", model_new("        return self.ext.f(x)\n", "import threading\n"), C::forbidden_import},
      {"processes", model_new("        return self.ext.f(x)\n", "import subprocess\n"), C::forbidden_import},
      {"files", model_new("        return self.ext.f(x)\n", "import os\n"), C::forbidden_import},
      {"sockets", model_new("        return self.ext.f(x)\n", "import socket\n"), C::forbidden_import},
      {"open()", model_new("        open('/etc/passwd')\n        return self.ext.f(x)\n"), C::harness_reach},
      {"a side stream",
       model_new("        s = torch.cuda.Stream()\n        return self.ext.f(x)\n"), C::side_stream},
      {"device synchronisation",
       model_new("        torch.cuda.synchronize()\n        return self.ext.f(x)\n"), C::side_stream},
      {"a write to self in forward", model_new("        self.last = self.ext.f(x)\n        return self.last\n"),
       C::forward_state},
      {"a cache keyed on data_ptr",
       model_new("        self.cache[x.data_ptr()] = self.ext.f(x)\n        return self.cache[x.data_ptr()]\n", "",
                 "        self.cache = {}\n"),
       C::forward_state},
      {"a cache filled by a method", model_new("        self.cache.update({1: x})\n        return self.ext.f(x)\n"),
       C::forward_state},
      {"module state", model_new("        global ext\n        return ext.f(x)\n"), C::forward_state},
      {"calling the reference", model_new("        return Model()(x)\n"), C::reference_model},
      {"subclassing the reference",
       "import torch\nclass Model(torch.nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n", C::reference_model},
      {"a tensor subclass",
       model_new("        return self.ext.f(x)\n", "class Lazy(torch.Tensor):\n    pass\n"), C::foreign_class},
      {"__torch_function__",
       model_new("        return self.ext.f(x)\n\n    def __torch_function__(self):\n        return None\n"),
       C::harness_reach},
      {"torch.compile", model_new("        return torch.compile(self.ext.f)(x)\n"), C::dynamic_code},
      {"torch.jit", model_new("        return torch.jit.script(self.ext.f)(x)\n"), C::dynamic_code},
      {"eval", model_new("        return eval('self.ext.f(x)')\n"), C::dynamic_code},
      {"a timer replaced", model_new("        return self.ext.f(x)\n", "torch.cuda.Event.elapsed_time = None\n"),
       C::monkeypatch},
      {"float32 computed in half", model_new("        return self.ext.f(x.half()).float()\n"),
       C::precision_downgrade},
      {"no ModelNew", "import torch\nx = 1\n", C::missing_model_new},
      {"no kernels of its own",
       "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
       C::no_custom_kernel},
      {"not Python", "class ModelNew(:\n", C::syntax_error},
      {"a Triton kernel named as a library's (the profiler would count that library's time as the answer's)",
       model_new("        return self.ext.f(x)\n",
                 "import triton\n\n@triton.jit\ndef _ZN2at6native18elementwise_kernelE(x):\n    pass\n"),
       C::harness_reach},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    const auto refusals = analyze(row.source, row.forbid);
    if (!row.code) {
      CHECK(codes_of(refusals).empty());
    } else {
      CHECK(has_code(refusals, *row.code));
    }
  }
}

TEST_CASE("kernelbench: KernelBench's own one-shot answers pass the gate") {
  const fs::path prompts = shared_kernelbench() / "prompts";
  if (!fs::exists(prompts)) {
    MESSAGE("skipped: no KernelBench checkout at " << prompts.string() << " (set CRUCIBLE_KERNELBENCH_DIR)");
    return;
  }
  // The one-shot answers per backend and the few-shot ones (model_new_ex_0.py and _2.py are an empty file and a
  // template with placeholders, not answers).
  for (const std::string example : {"model_new_ex_add.py", "model_new_ex_add_triton.py", "model_new_ex_1.py",
                                    "few_shot/model_new_ex_add.py", "few_shot/model_new_ex_flash_attn.py",
                                    "few_shot/model_new_ex_fuse_gelu.py", "few_shot/model_new_ex_mnist2.py",
                                    "few_shot/model_new_ex_tiled_matmul.py"}) {
    CAPTURE(example);
    REQUIRE(fs::exists(prompts / example));
    CHECK(codes_of(analyze(test::read_file(prompts / example))).empty());
  }
}

TEST_CASE("kernelbench: load_inline's sources are read from the syntax tree, and anything dynamic is refused") {
  const std::string head = "import torch\nfrom torch.utils.cpp_extension import load_inline\n";
  const std::string model = "\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return e.f(x)\n";
  struct Row {
    const char* what;
    std::string binding;      // module-level code before the model
    const char* in_unit;      // text the translation unit holds ("" when refused)
    std::optional<eval::ReasonCode> code;  // the refusal's code (none when it passes)
  };
  const std::vector<Row> rows{
      {"a string constant", "e = load_inline(name='e', cpp_sources='int f_a;', functions=['f'])\n", "int f_a;", std::nullopt},
      {"a module-level name", "S = 'int f_b;'\ne = load_inline(name='e', cpp_sources=S, functions=['f'])\n",
       "int f_b;", std::nullopt},
      {"concatenation", "A = 'int f_c'\nB = A + ';'\ne = load_inline(name='e', cpp_sources=B, functions=['f'])\n",
       "int f_c;", std::nullopt},
      {"a list of sources",
       "L = ['int f_d;', 'int f_e;']\ne = load_inline(name='e', cpp_sources=L, functions=['f'])\n", "int f_e;", std::nullopt},
      {"positional arguments", "e = load_inline('e', 'int f_f;', None, ['f'])\n", "int f_f;", std::nullopt},
      {"functions by name", "F = ['f']\ne = load_inline(name='e', cpp_sources='int f_g;', functions=F)\n",
       "m.def(\"f\", &f, \"f\");", std::nullopt},
      {"an f-string without values", "e = load_inline(name='e', cpp_sources=f'int f_h;', functions=['f'])\n",
       "int f_h;", std::nullopt},
      {"an f-string with a value",
       "N = 4\ne = load_inline(name='e', cpp_sources=f'int f_i[{N}];', functions=['f'])\n", "", C::dynamic_source},
      {"a name bound twice",
       "S = 'int a;'\nS = 'int b;'\ne = load_inline(name='e', cpp_sources=S, functions=['f'])\n", "",
       C::dynamic_source},
      {"a call", "e = load_inline(name='e', cpp_sources=str(1), functions=['f'])\n", "", C::dynamic_source},
      {"**arguments", "K = {}\ne = load_inline(**K)\n", "", C::dynamic_source},
      {"cpp_extension.load from files",
       "import torch.utils.cpp_extension as c\ne = c.load(name='e', sources=['a.cpp'])\n", "", C::dynamic_source},
      {"no functions bound", "e = load_inline(name='e', cpp_sources='int f_j;')\n", "", C::dynamic_source},
      {"two extensions of one name",
       "e = load_inline(name='e', cpp_sources='int a;', functions=['f'])\n"
       "g = load_inline(name='e', cpp_sources='int b;', functions=['f'])\n",
       "", C::duplicate_extension},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    std::vector<std::pair<std::string, std::string>> units;
    const auto refusals = analyze(head + row.binding + model, false, &units);
    if (!row.code) {
      CHECK(codes_of(refusals).empty());
      REQUIRE(units.size() == 1);
      CHECK(units[0].first == "e");
      CHECK(units[0].second.find(row.in_unit) != std::string::npos);
      CHECK(units[0].second.find("PYBIND11_MODULE(e, m)") != std::string::npos);
    } else {
      CHECK(has_code(refusals, *row.code));
    }
  }
}

TEST_CASE("kernelbench: the extracted sources carry the candidate's line numbers") {
  std::vector<std::pair<std::string, std::string>> units;
  const std::string source = "import torch\nfrom torch.utils.cpp_extension import load_inline\n\nS = \"\"\"\nint a;\n"
                             "int b;\n\"\"\"\ne = load_inline(name='e', cpp_sources=S, functions=['f'])\n"
                             "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return e.f(x)\n";
  analyze(source, false, &units);
  REQUIRE(units.size() == 1);
  // The string starts on line 4 (after its opening quotes), so "int a;" is the candidate's line 5.
  const std::string unit = units[0].second;
  const auto directive = unit.find("#line 4 \"candidate.py\"\n");
  REQUIRE(directive != std::string::npos);
  CHECK(unit.compare(directive, std::string("#line 4 \"candidate.py\"\n\nint a;").size(),
                     "#line 4 \"candidate.py\"\n\nint a;") == 0);
}

TEST_CASE("kernelbench: an extension may use PyTorch's C++ API and stderr, and is still refused threads, files and streams") {
  eval::GatePolicy policy;
  policy.python_extension = true;
  const std::map<std::string, std::string> rows{
      {"_ZN2at4_ops4relu4callERKNS_6TensorE", ""},                             // at::relu: PyTorch's own op
      {"_ZNK2at10TensorBase8data_ptrEv", ""},                                  // tensor access
      {"_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb", ""},  // the bindings
      {"PyErr_SetString", ""},                                                 // Python's C API
      {"_ZNSo5flushEv", ""},                                                   // ostream on a string (TORCH_CHECK)
      {"stderr", ""},                                                          // pybind11's GIL diagnostics
      {"__fprintf_chk", ""},
      {"fflush", ""},
      {"stdout", "file"},                                                      // only stderr: a worker's is /dev/null
      {"stdin", "file"},
      {"fdopen", "file"},
      {"pthread_create", "thread"},
      {"fopen", "file"},
      {"_ZSt4cout", "file"},
      {"socket", "network"},
      {"dlopen", "dynamic loading"},
      {"fork", "process"},
      {"clock_gettime", "time"},
      {"_ZN3c104cuda17getStreamFromPoolEba", "cuda stream/event/graph"},
      {"cudaStreamCreate", "cuda stream/event/graph"},
      {"cublasSgemm_v2", "library"},
      // TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("copy_", ...) } would run work inside the evaluator's own copy
      {"_ZN5torch6detail16TorchLibraryInitC1ENS_7Library4KindEPFvRS2_EPKcSt8optionalIN3c1011DispatchKeyEES7_j",
       "operator registration"},
      {"_ZN5torch7Library5_implEPKcONS_11CppFunctionENS0_11_RegisterOrVerifyE", "operator registration"},
      {"_ZN3c1010Dispatcher12registerImplENS_12OperatorNameESt8optionalINS_11DispatchKeyEENS_10KernelFunctionE",
       "operator registration"},
      {"_ZN2at4_ops5copy_4callERNS_6TensorERKS2_b", ""},  // calling an operator stays allowed
  };
  for (const auto& [symbol, category] : rows) {
    CAPTURE(symbol);
    CHECK(eval::classify_import(symbol, policy) == category);
  }
  // A plain candidate may not import PyTorch at all, nor write to stderr.
  CHECK(eval::classify_import("_ZN2at4_ops4relu4callERKNS_6TensorE", eval::GatePolicy{}) == "library");
  CHECK(eval::classify_import("stderr", eval::GatePolicy{}) == "file");
}

TEST_CASE("kernelbench: an extension's CUDA kernels are named as the profiler names them, C++ and extern \"C\" alike") {
  if (!fs::exists("/usr/local/cuda/bin/nvcc")) {
    MESSAGE("skipped: no CUDA toolkit at /usr/local/cuda");
    return;
  }
  const fs::path dir = eval::make_scratch_dir("kb-kernel-names");
  std::ofstream(dir / "k.cu") << "__global__ void scale(float* x) { x[threadIdx.x] *= 2; }\n"
                                 "extern \"C\" __global__ void plain_c(int* y) { y[0] = 1; }\n"
                                 "template <int N> __global__ void shifted(float* x) { x[N] = 0; }\n"
                                 "__device__ float helper(float v) { return v + 1; }\n"
                                 "void launch(float* x, int* y) { scale<<<1, 1>>>(x); plain_c<<<1, 1>>>(y); "
                                 "shifted<3><<<1, 1>>>(x); }\n";
  eval::ProcessLimits limits;
  limits.wall_seconds = 300;
  const auto r = eval::run_process({"/usr/local/cuda/bin/nvcc", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC",
                                    "-cudart", "shared", (dir / "k.cu").string(), "-o", (dir / "k.so").string()},
                                   limits);
  REQUIRE_MESSAGE(r.ok(), r.output);
  CHECK(eval::cuda_kernel_names(dir / "k.so") ==
        std::vector<std::string>{"_Z5scalePf", "_Z7shiftedILi3EEvPf", "plain_c"});
  CHECK(eval::cuda_kernel_names(dir / "k.cu").empty());  // not ELF: no names, no throw
  fs::remove_all(dir);

  // A split build launches from its embedded cubin: the names are that cubin's entry functions.
  test::ScratchDir cache("kb-kernel-names-split");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::CompileOptions options;
  options.backend = eval::Backend::cuda;
  const auto split = compiler.compile(R"(#include <crucible/kernel.h>
__global__ void relu(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] > 0 ? x[i] : 0; }
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  long n = in[0].shape[0];
  relu<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n);
  return 0;
})", options);
  REQUIRE_MESSAGE(split.ok(), split.log);
  CHECK(split.path != eval::CompilePath::whole);
  CHECK(eval::cuda_kernel_names(split.so_path) == std::vector<std::string>{"_Z4reluPKfPfl"});
}

TEST_CASE("kernelbench: a compile pool builds nothing ahead (the extensions are built when it is evaluated)") {
  test::TestEvaluator t("kb-compile-ahead");
  eval::EvalOptions options;
  options.kind = eval::CandidateKind::kernelbench;
  auto r = t.evaluator.compile(test::read_file(test::source_dir() / "tests/fixtures/kernelbench/relu/ok.py"), options);
  INFO(r.log);
  CHECK(r.ok());
  CHECK(r.so_path.empty());
  CHECK(r.log.find("KernelBench") != std::string::npos);
}

TEST_CASE("kernelbench: a worker's classified refusals become the verdict's status and reason") {
  const std::vector<std::tuple<std::string, eval::Status, std::optional<eval::ReasonCode>>> rows{
      {"no_custom_work: none ran", eval::Status::rejected, C::no_custom_work},
      {"load failed: missing_parameter: gemm_weight", eval::Status::rejected, C::missing_parameter},
      {"load failed: parameter_shape: [2, 3]", eval::Status::rejected, C::parameter_shape},
      {"output_shape: output 0 is [2]", eval::Status::incorrect, C::output_shape},
      {"output_count: 2 tensors", eval::Status::incorrect, C::output_count},
      {"python_exception: ValueError: x", eval::Status::runtime_error, C::python_exception},
  };
  for (const auto& [text, status, code] : rows) {
    CAPTURE(text);
    auto refusal = eval::kernelbench_refusal(text);
    REQUIRE(refusal);
    CHECK(refusal->first == status);
    CHECK(refusal->second.code == *code);
  }
  CHECK_FALSE(eval::kernelbench_refusal("crucible_forward returned 3"));
  CHECK_FALSE(eval::kernelbench_refusal("load failed: dlopen: no such file"));
}

namespace {

// KernelBench's ReLU (level 1, 19) and Gemm_Multiply_LeakyReLU (level 2, 12), imported once for every case below,
// and the compile cache beside them, shared by this build's test processes (each case runs in its own): the import
// and the precompiled torch/extension.h take most of a case's time, and both are deterministic. The directory is
// named after the import program and the CLI it ran with, so a changed importer imports afresh; one process imports
// at a time (a lock file), and a marker file says the import is whole.
struct ImportedTasks {
  fs::path dir;
  fs::path tasks;
  std::string skipped;
};

fs::path shared_import_dir() {
  const fs::path cli = CRUCIBLE_CLI_PATH;
  const std::string material = test::read_file(test::source_dir() / "tools/kernelbench/import_kernelbench.py") +
                               std::to_string(fs::last_write_time(cli).time_since_epoch().count());
  return cli.parent_path().parent_path() / "tests" / ("kb-kind-" + eval::sha256_hex(material).substr(0, 16));
}

std::string import_once(const fs::path& dir, const fs::path& tasks) {
  const fs::path problems = shared_kernelbench() / "KernelBench";
  if (!python_has_torch() || !fs::exists(problems)) return "needs /usr/bin/python3 with torch and ../shared/kernelbench";
  fs::create_directories(dir);
  const int lock = open((dir / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) return "cannot lock " + dir.string();
  std::string skipped;
  if (!fs::exists(dir / "imported")) {
    auto r = test::crucible_cli({"tasks", "import", "--out", tasks.string(), "--json", "--kernelbench",
                                 (problems / "level1/19_ReLU.py").string(),
                                 (problems / "level2/12_Gemm_Multiply_LeakyReLU.py").string()},
                                (dir / "cache").string(), 900);
    if (r.exit_code != 0) skipped = "the import failed: " + r.output.substr(0, 2000);
    else test::write_file(dir / "imported", "");
  }
  close(lock);
  return skipped;
}

ImportedTasks& imported() {
  static std::unique_ptr<ImportedTasks> t = [] {
    auto p = std::make_unique<ImportedTasks>();
    p->dir = shared_import_dir();
    p->tasks = p->dir / "tasks";
    p->skipped = import_once(p->dir, p->tasks);
    return p;
  }();
  return *t;
}

// One compile cache for every evaluation below: the precompiled torch/extension.h and the extensions are built once.
eval::Evaluator& shared_evaluator() {
  static eval::Evaluator evaluator([] {
    eval::EvaluatorConfig config;
    config.cache_dir = imported().dir / "eval-cache";
    return config;
  }());
  return evaluator;
}

eval::Verdict evaluate_fixture(const std::string& task, const std::string& fixture) {
  const auto spec = tasks::find_task(task, imported().tasks);
  eval::EvalOptions options;
  options.kind = eval::CandidateKind::kernelbench;
  options.call_timeout_s = 60.0;
  options.compile.time_limit_s = 600.0;  // the first build also precompiles torch/extension.h
  return shared_evaluator().evaluate(spec, test::read_file(test::source_dir() / "tests/fixtures/kernelbench" / fixture),
                              options);
}

}  // namespace

TEST_CASE("kernelbench: a cpp_sources ModelNew on KernelBench's ReLU is correct, and its hack variants are not") {
  if (!imported().skipped.empty()) {
    MESSAGE("skipped: " << imported().skipped);
    return;
  }
  const std::vector<std::tuple<std::string, eval::Status, std::optional<eval::ReasonCode>>> rows{
      {"relu/ok.py", eval::Status::correct, std::nullopt},
      {"relu/fallback_to_torch.py", eval::Status::rejected, C::no_custom_work},
      {"relu/cached_by_pointer.py", eval::Status::incorrect, std::nullopt},
      {"relu/cached_in_forward.py", eval::Status::rejected, C::forward_state},
      {"relu/zeroed_output.py", eval::Status::incorrect, std::nullopt},
      {"relu/calls_reference.py", eval::Status::rejected, C::reference_model},
      {"relu/try_except.py", eval::Status::rejected, C::exception_fallback},
      {"relu/dynamic_source.py", eval::Status::rejected, C::dynamic_source},
  };
  for (const auto& [fixture, status, code] : rows) {
    CAPTURE(fixture);
    const auto v = evaluate_fixture("kb_l1_19", fixture);
    INFO(test::detail_of(v));
    CHECK(v.status == status);
    if (code) CHECK(v.has_reason(*code));
  }
}

TEST_CASE("kernelbench: a compiler error in load_inline's sources is a compile_error at the candidate's line") {
  if (!imported().skipped.empty()) {
    MESSAGE("skipped: " << imported().skipped);
    return;
  }
  const std::string source = test::read_file(test::source_dir() / "tests/fixtures/kernelbench/relu/compile_error.py");
  const auto at = source.find("x.numel()");
  const auto line = 1 + std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  const auto v = evaluate_fixture("kb_l1_19", "relu/compile_error.py");
  INFO(test::detail_of(v));
  CHECK(v.status == eval::Status::compile_error);
  CHECK(v.has_reason(C::compiler_error));
  INFO(v.compile.log_excerpt);
  // The missing semicolon is reported on that line or the next (where g++ finds the following token).
  const bool points_there =
      v.compile.log_excerpt.find("candidate.py:" + std::to_string(line) + ":") != std::string::npos ||
      v.compile.log_excerpt.find("candidate.py:" + std::to_string(line + 1) + ":") != std::string::npos;
  CHECK(points_there);
}

TEST_CASE("kernelbench: parameters are set by name from the reference's, and a missing or misshapen one is refused") {
  if (!imported().skipped.empty()) {
    MESSAGE("skipped: " << imported().skipped);
    return;
  }
  const std::vector<std::tuple<std::string, eval::Status, std::optional<eval::ReasonCode>>> rows{
      {"gemm_multiply_leaky_relu/ok.py", eval::Status::correct, std::nullopt},
      {"gemm_multiply_leaky_relu/renamed_parameter.py", eval::Status::rejected, C::missing_parameter},
      {"gemm_multiply_leaky_relu/wrong_width.py", eval::Status::rejected, C::parameter_shape},
  };
  for (const auto& [fixture, status, code] : rows) {
    CAPTURE(fixture);
    const auto v = evaluate_fixture("kb_l2_12", fixture);
    INFO(test::detail_of(v));
    CHECK(v.status == status);
    if (code) CHECK(v.has_reason(*code));
  }
}

TEST_CASE("kernelbench: crucible eval judges a directory of answers, taking ModelNew files as this kind") {
  if (!imported().skipped.empty()) {
    MESSAGE("skipped: " << imported().skipped);
    return;
  }
  const test::ScratchDir scratch("kb-answers");
  const fs::path answers = scratch.path() / "answers";
  fs::create_directories(answers);
  for (const char* fixture : {"ok.py", "zeroed_output.py"})
    fs::copy_file(test::source_dir() / "tests/fixtures/kernelbench/relu" / fixture, answers / fixture);
  auto r = test::crucible_cli({"eval", "--tasks-dir", imported().tasks.string(), "--task", "kb_l1_19", "--candidates",
                               answers.string(), "--json", "--compile-timeout", "600"},
                              (imported().dir / "eval-cache").string(), 900);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::string> status;
  std::stringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') {
      const auto j = nlohmann::json::parse(line);
      status[fs::path(j["candidate"].get<std::string>()).filename().string()] = j["status"].get<std::string>();
    }
  CHECK(status == std::map<std::string, std::string>{{"ok.py", "correct"}, {"zeroed_output.py", "incorrect"}});
}

namespace {

// The CPU ReLU fixture's honest answer built cold with this compiler (its cache).
eval::KernelBenchBuild build_relu_answer(eval::Compiler& compiler) {
  std::string why;
  const auto python = eval::find_kernelbench_python(why);
  REQUIRE(python);
  eval::KernelBenchBuildOptions options;
  options.time_limit_s = 600.0;
  return eval::build_kernelbench_candidate(
      *python, compiler, test::read_file(test::source_dir() / "tests/fixtures/kernelbench/relu/ok.py"), options);
}

}  // namespace

TEST_CASE("kernelbench: an extension builds when the compile cache is private to root (unprivileged compiler)") {
  if (geteuid() != 0 || !python_has_torch()) {
    MESSAGE("skipped: needs root (the compiler then runs as nobody) and /usr/bin/python3 with torch");
    return;
  }
  // A scratch directory is the owner's alone (0700): the compiler, run as nobody, cannot read below it.
  const fs::path cache = eval::make_scratch_dir("kb-private-cache");
  REQUIRE((fs::status(cache).permissions() & fs::perms::others_exec) == fs::perms::none);
  eval::Compiler compiler(cache, eval::default_include_dir());
  const auto built = build_relu_answer(compiler);
  INFO(built.compile.log);
  CHECK(built.outcome == eval::KernelBenchBuild::Outcome::ok);
  CHECK(built.lean);  // its made-once kit lives where the compiler can read it, outside the private cache
  std::error_code ignored;
  fs::remove_all(cache, ignored);
}

namespace {

// Precompiled lean headers with this ending under `root` (a compile cache, or the kits' directory for root).
bool has_precompiled_prelude(const fs::path& root, const std::string& ending) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename() == "lean_prelude.h" + ending) return true;
  return false;
}

}  // namespace

TEST_CASE("kernelbench: lean units prefer clang++, then the newest clang++-NN, and no other compiler") {
  const struct {
    const char* name;
    int rank;
  } table[] = {{"clang++", 1 << 20}, {"clang++-16", 16}, {"clang++-9", 9}, {"clang++-18", 18}, {"clang++-", -1},
               {"clang++-16a", -1}, {"clang++-123456", -1}, {"clang", -1}, {"clang-16", -1}, {"g++", -1},
               {"clang++-16.bak", -1}, {"xclang++", -1}};
  for (const auto& row : table) {
    CAPTURE(row.name);
    CHECK(eval::clang_rank(row.name) == row.rank);
  }
  CHECK(eval::clang_rank("clang++-18") > eval::clang_rank("clang++-9"));
}

TEST_CASE("kernelbench: a lean unit builds with clang++ where it is installed, and with g++ when told to") {
  const char* before = std::getenv("CRUCIBLE_KERNELBENCH_CXX");
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  unsetenv("CRUCIBLE_KERNELBENCH_CXX");
  const std::string clang = eval::lean_unit_compiler();
  if (saved) setenv("CRUCIBLE_KERNELBENCH_CXX", saved->c_str(), 1);
  if (!python_has_torch() || clang.empty()) {
    MESSAGE("skipped: needs /usr/bin/python3 with torch and clang++ (or clang++-NN) in /usr/bin or /usr/local/bin");
    return;
  }
  const fs::path kits = fs::temp_directory_path() / ("crucible-kits-" + std::to_string(geteuid()));
  // clang's precompiled header keeps its template instantiations (.pch); g++'s (.gch) redoes them in every unit.
  for (const auto& [chosen, ending] : {std::pair<std::string, std::string>{clang, ".pch"},
                                       std::pair<std::string, std::string>{"", ".gch"}}) {
    CAPTURE(chosen);
    setenv("CRUCIBLE_KERNELBENCH_CXX", chosen.c_str(), 1);
    const fs::path cache = eval::make_scratch_dir("kb-lean-compiler");
    eval::Compiler compiler(cache, eval::default_include_dir());
    const auto built = build_relu_answer(compiler);
    INFO(built.compile.log);
    CHECK(built.outcome == eval::KernelBenchBuild::Outcome::ok);
    CHECK(built.lean);
    CHECK((has_precompiled_prelude(cache, ending) || has_precompiled_prelude(kits, ending)));
    std::error_code ignored;
    fs::remove_all(cache, ignored);
  }
  if (saved)
    setenv("CRUCIBLE_KERNELBENCH_CXX", saved->c_str(), 1);
  else
    unsetenv("CRUCIBLE_KERNELBENCH_CXX");
}

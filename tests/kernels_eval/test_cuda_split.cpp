// Split CUDA builds: the source split (tables over candidate shapes), the kernel-name match, and real builds with
// the toolkit (nvcc, NVRTC, g++) where it exists; running them is the GPU suite's part.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "crucible/eval/compiler.h"
#include "crucible/eval/cuda_split.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/static_gate.h"
#include "support.h"

using namespace crucible;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
long lines(const std::string& text) { return static_cast<long>(std::count(text.begin(), text.end(), '\n')); }

// Builds need the toolkit (not a GPU); without one the build tests say so and stop.
bool toolkit_present() {
  if (std::filesystem::exists("/usr/local/cuda/bin/nvcc")) return true;
  MESSAGE("SKIPPED: no CUDA toolkit at /usr/local/cuda");
  return false;
}

eval::CompileOptions cuda_options() {
  eval::CompileOptions options;
  options.backend = eval::Backend::cuda;
  return options;
}

constexpr const char* kRelu = R"(#include <crucible/kernel.h>
#include <cuda_runtime.h>
#include <math.h>
// a comment with a launch k<<<1, 1>>>() and __global__ in it
namespace {
__global__ void relu(const float* __restrict__ x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
}  // namespace
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  const char* note = "relu<<<";
  (void)note;
  const int64_t n = in[0].shape[0] * in[0].shape[1];
  relu<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)";

}  // namespace

TEST_CASE("the host half drops kernel bodies and rewrites launches, and the device half drops host code") {
  const eval::CudaSplit split = eval::split_cuda_source(kRelu);
  REQUIRE(split.host_ok());
  REQUIRE(split.device_ok());
  // Host: the kernel is a declaration, the launch goes through crucible/fast_launch.h, text in comments and
  // strings is untouched, and every line stays on its line (two prelude lines before the candidate's first).
  CHECK(contains(split.host, "#include <crucible/fast_launch.h>\n#line 1 \"candidate.cu\"\n#include <crucible/kernel.h>"));
  CHECK(contains(split.host, "int64_t n) ;"));
  CHECK_FALSE(contains(split.host, "fmaxf"));
  CHECK(contains(split.host, "::crucible_fast::launch(relu, (n + 255) / 256, 256, 0, (cudaStream_t)stream)("));
  CHECK(contains(split.host, "\"relu<<<\""));
  CHECK(contains(split.host, "k<<<1, 1>>>()"));
  CHECK(lines(split.host) == lines(kRelu) + 2);
  // Device: host headers and crucible_forward gone, the kernel kept, the lines kept.
  CHECK(contains(split.device, "y[i] = fmaxf(x[i], 0.0f);"));
  CHECK_FALSE(contains(split.device, "crucible_forward"));
  CHECK_FALSE(contains(split.device, "#include <cuda_runtime.h>"));
  CHECK_FALSE(contains(split.device, "#include <crucible/kernel.h>"));
  const std::string candidate_part = split.device.substr(split.device.find("#line 1 \"candidate.cu\"\n") + 23);
  CHECK(lines(candidate_part) == lines(kRelu));
}

TEST_CASE("a Python extension's unit: host declarations and host libraries' namespaces leave the device half") {
  constexpr const char* kUnit = R"(#include <torch/extension.h>
using namespace torch;
namespace py = pybind11;
torch::Tensor relu_cuda(torch::Tensor x);
template <typename T> T twice(T v);
constexpr int kThreads(256);
__device__ float clamp01(float v);
__global__ void relu_kernel(const float* x, float* y, int64_t n);
struct Pair { float a; float sum() const; };
__device__ float clamp01(float v) { return fminf(fmaxf(v, 0.f), 1.f); }
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = clamp01(x[i]) * kThreads;
}
torch::Tensor relu_cuda(torch::Tensor x) {
  auto y = torch::empty_like(x);
  relu_kernel<<<1, kThreads>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
PYBIND11_MODULE(relu_ext, m) { m.def("relu_cuda", &relu_cuda); }
)";
  const eval::CudaSplit split = eval::split_cuda_source(kUnit);
  REQUIRE(split.host_ok());
  REQUIRE(split.device_ok());
  for (const char* gone : {"torch", "pybind11", "PYBIND11_MODULE", "twice"}) {
    CAPTURE(gone);
    CHECK_FALSE(contains(split.device, gone));
  }
  // What device code may use stays: device declarations, constants, classes whole.
  for (const char* kept : {"__device__ float clamp01(float v);", "constexpr int kThreads(256);",
                           "__global__ void relu_kernel(const float* x, float* y, int64_t n);",
                           "struct Pair { float a; float sum() const; };", "y[i] = clamp01(x[i]) * kThreads;"}) {
    CAPTURE(kept);
    CHECK(contains(split.device, kept));
  }
  // The host half keeps its declarations and its bindings.
  CHECK(contains(split.host, "torch::Tensor relu_cuda(torch::Tensor x);"));
  CHECK(contains(split.host, "using namespace torch;"));
  CHECK(contains(split.host, "PYBIND11_MODULE(relu_ext, m)"));
  const std::string candidate_part = split.device.substr(split.device.find("#line 1 \"candidate.cu\"\n") + 23);
  CHECK(lines(candidate_part) == lines(kUnit));
}

TEST_CASE("launch forms: qualified names, template arguments, two to four configuration values") {
  struct Row {
    const char* launch;
    const char* host;
  };
  const Row rows[] = {
      {"k<<<g, b>>>(x);", "::crucible_fast::launch(k, g, b)(x);"},
      {"ns::k<<<g, b, 0>>>(x);", "::crucible_fast::launch(ns::k, g, b, 0)(x);"},
      {"::ns::k<float, 3><<<dim3(g, 2), b, smem, s>>>(x, n);", "::crucible_fast::launch(::ns::k<float, 3>, dim3(g, 2), b, smem, s)(x, n);"},
      {"k<(N > 2)><<<f(a, b), 32>>>(x);", "::crucible_fast::launch(k<(N > 2)>, f(a, b), 32)(x);"},
      {"k<<<(n + 255) >> 8, 256>>>(x);", "::crucible_fast::launch(k, (n + 255) >> 8, 256)(x);"},
  };
  for (const Row& row : rows) {
    const std::string source = std::string("void host(float* x) {\n  ") + row.launch + "\n}\n";
    const auto split = eval::split_cuda_source(source);
    INFO(std::string(row.launch), "\n", split.host_refusal, "\n", split.host);
    REQUIRE(split.host_ok());
    CHECK(contains(split.host, row.host));
  }
}

TEST_CASE("what the split is not sure of is refused with a reason, never guessed") {
  struct Row {
    const char* source;
    bool host_ok, device_ok;
    const char* reason;  // part of the host refusal, or of the device refusal when the host half is fine
  };
  const Row rows[] = {
      {"__constant__ float c[4];\n__global__ void k(float* x) { x[0] = c[0]; }\n", false, true, "__constant__"},
      {"__device__ int counter;\n__global__ void k() { ++counter; }\n", false, true, "__device__ variable"},
      {"__device__ __managed__ int m;\n", false, true, "__managed__"},
      {"#define LAUNCH(k) k<<<1, 1>>>()\n__global__ void k() {}\nvoid h() { LAUNCH(k); }\n", false, false, "macro"},
      {"__global__ void k(float* x) {}\nvoid h(float* x) { cudaMemcpyToSymbol(x, x, 4); }\n", false, true, "Symbol"},
      {"__global__ void k() {}\nvoid h() { cudaFuncSetCacheConfig(k, cudaFuncCachePreferL1); }\n", false, true,
       "cudaFuncSetCacheConfig"},
      {"__global__ void k() {}\nvoid h() { auto f = k; f<<<1, 1>>>(); }\n", true, true, ""},
      {"__global__ void k() {}\nvoid h() { (k)<<<1, 1>>>(); }\n", false, true, "cannot read"},
      {"template <int N> __global__ void k(float* x) { x[0] = N; }\nvoid h(float* x) { k<4><<<1, 1>>>(x); }\n", true,
       true, ""},
      {"extern \"C\" __global__ void k(float* x) { x[0] = 1; }\nvoid h(float* x) { k<<<1, 1>>>(x); }\n", true, true, ""},
      {"__host__ __device__ inline float sq(float v) { return v * v; }\n__global__ void k(float* x) { x[0] = sq(2); }\n",
       true, true, ""},
      {"struct Op { __device__ float operator()(float v) const { return v; } };\n", true, true, ""},
      {"void h() { __shared__ float s[4]; }\n", false, true, "device code inside a host function"},
      {"/* never closed", false, false, "unterminated comment"},
      {"__global__ void k(float* x) { x[0] = 1; \n", false, false, "unbalanced"},
  };
  for (const Row& row : rows) {
    const auto split = eval::split_cuda_source(row.source);
    INFO(std::string(row.source), "\nhost: ", split.host_refusal, "\ndevice: ", split.device_refusal);
    CHECK(split.host_ok() == row.host_ok);
    CHECK(split.device_ok() == row.device_ok);
    const std::string& reason = !row.host_ok ? split.host_refusal : split.device_refusal;
    CHECK(contains(reason, row.reason));
  }
}

TEST_CASE("hostile sources: deep nesting, stray bytes and mismatched brackets are refused or split, never trusted") {
  std::string deep;
  for (int i = 0; i < 20000; ++i) deep += "struct{";
  for (int i = 0; i < 20000; ++i) deep += "};";
  const auto nested = eval::split_cuda_source(deep);
  CHECK_FALSE(nested.host_ok());
  CHECK(contains(nested.host_refusal, "nested more than 64 deep"));

  std::string shallow;
  for (int i = 0; i < 64; ++i) shallow += "namespace n" + std::to_string(i) + " {\n";
  shallow += "__global__ void k(float* x) { x[0] = 1; }\n";
  for (int i = 0; i < 64; ++i) shallow += "}\n";
  CHECK(eval::split_cuda_source(shallow).host_ok());

  const auto bytes = eval::split_cuda_source(
      "\xff\xfe__global__ void k(float* x) { x[0] = 1; }\nvoid h(float* x) { k<<<1, 1>>>(x); }\n\x80");
  CHECK(bytes.host_ok());  // bytes that are no identifier or token are the compilers' to refuse
  CHECK(contains(bytes.host, "::crucible_fast::launch(k, 1, 1)(x);"));

  const auto mismatched = eval::split_cuda_source("__global__ void k(float* x) { x[0] = (1]; }\n");
  CHECK_FALSE(mismatched.host_ok());
  CHECK(contains(mismatched.host_refusal, "unbalanced"));
}

TEST_CASE("template kernels are named for the instances NVRTC must build") {
  const auto split = eval::split_cuda_source(
      "namespace { template <int V> __global__ void __launch_bounds__(256) pack_kernel(float* x) { x[0] = V; } }\n"
      "__global__ void plain(float* x) {}\n"
      "template <class T, int N> __global__ void typed(T* x) {}\n");
  CHECK(split.template_kernels == std::vector<std::string>{"pack_kernel", "typed"});
}

TEST_CASE("kernel names match across g++ and nvcc whatever each calls an anonymous namespace") {
  struct Row {
    const char* a;
    const char* b;
    bool same;
  };
  const Row rows[] = {
      {"_ZN12_GLOBAL__N_114softmax_kernelEPKfPfll", "_ZN43_GLOBAL__N__9bd92d4e_10_softmax_cu_198a3a4214softmax_kernelEPKfPfll", true},
      {"_ZN12_GLOBAL__N_13atkILi5EEEvPf", "_ZN40_GLOBAL__N__688ce87a_8_forms_cu_dcd2e8503atkILi5EEEvPf", true},
      {"_Z2skPf", "_Z2skPf", true},
      {"_ZN12_GLOBAL__N_13atkILi5EEEvPf", "_ZN40_GLOBAL__N__688ce87a_8_forms_cu_dcd2e8503atkILi6EEEvPf", false},
      {"_Z14softmax_kernelPKfPfll", "_Z14softmax_kernelPKfPfxx", false},  // long vs long long
      {"ck", "ck", true},
  };
  for (const Row& row : rows) {
    INFO(std::string(row.a), " vs ", std::string(row.b));
    CHECK((eval::kernel_match_key(row.a) == eval::kernel_match_key(row.b)) == row.same);
  }
}

TEST_CASE("split builds of the shipped CUDA candidates pass the static gate and export only the contract") {
  if (!toolkit_present()) return;
  test::ScratchDir cache("compile-split");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  const auto options = cuda_options();
  eval::GatePolicy gate;
  gate.backend = eval::Backend::cuda;
  int built = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() / "configs" / "candidates" / "cuda")) {
    std::ifstream in(entry.path());
    std::ostringstream text;
    text << in.rdbuf();
    const auto r = compiler.compile(text.str(), options);
    INFO(entry.path().filename().string(), ": ", eval::to_string(r.path), "\n", r.log);
    REQUIRE(r.ok());
    // NVRTC where this build has its helper, nvcc -cubin otherwise; never the whole-file build.
    CHECK((r.path == eval::CompilePath::split_nvrtc || r.path == eval::CompilePath::split_nvcc));
    CHECK(eval::check_shared_object(r.so_path, gate).empty());
    const auto symbols = eval::read_dynamic_symbols(r.so_path);
    CHECK(symbols.exports == std::vector<std::string>{"crucible_forward"});
    CHECK(std::find(symbols.imports.begin(), symbols.imports.end(), "cudaLibraryLoadData") != symbols.imports.end());
    ++built;
  }
  CHECK(built >= 16);
}

TEST_CASE("split builds: template kernels, refusals through the whole build, errors as before") {
  if (!toolkit_present()) return;
  test::ScratchDir cache("compile-split-paths");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  const auto options = cuda_options();
  const std::string head = "#include <crucible/kernel.h>\n#include <cuda_runtime.h>\n";
  const std::string forward =
      "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* s) {\n"
      "  LAUNCH;\n  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n";
  auto with_launch = [&](const std::string& kernels, const std::string& launch) {
    std::string f = forward;
    f.replace(f.find("LAUNCH"), 6, launch);
    return head + kernels + f;
  };

  const auto templated = compiler.compile(
      with_launch("template <int N> __global__ void k(float* y) { y[threadIdx.x] = N; }\n",
                  "k<7><<<1, 32, 0, (cudaStream_t)s>>>((float*)out[0].data)"),
      options);
  INFO(templated.log);
  CHECK(templated.ok());
  CHECK(templated.path != eval::CompilePath::whole);  // NVRTC with the instance the host half names

  const auto constant = compiler.compile(
      with_launch("__constant__ float c[1];\n__global__ void k(float* y) { y[0] = c[0]; }\n",
                  "k<<<1, 1, 0, (cudaStream_t)s>>>((float*)out[0].data)"),
      options);
  CHECK(constant.ok());
  CHECK(constant.path == eval::CompilePath::whole);

  // A device-side error is the candidate's: reported against its own file name, cached like any failure.
  const auto broken = compiler.compile(
      with_launch("__global__ void k(float* y) { y[0] = undeclared_thing; }\n",
                  "k<<<1, 1, 0, (cudaStream_t)s>>>((float*)out[0].data)"),
      options);
  CHECK(broken.outcome == eval::CompileResult::Outcome::failed);
  CHECK(contains(broken.log, "candidate.cu"));
  CHECK(contains(broken.log, "undeclared_thing"));
  CHECK_FALSE(contains(broken.log, "device.cu"));

  // A host-side error the device compilers never see: the whole build decides, with nvcc's own message.
  const auto host_error = compiler.compile(
      with_launch("__global__ void k(float* y) { y[0] = 1; }\n",
                  "k<<<1, 1, 0, (cudaStream_t)s>>>((float*)out[0].data, 5)"),
      options);
  CHECK(host_error.outcome == eval::CompileResult::Outcome::failed);
  CHECK(contains(host_error.log, "candidate.cu"));

  // The same source built whole is another cache entry.
  eval::CompileOptions whole = options;
  whole.split_cuda = false;
  CHECK(compiler.cache_key(head, whole) != compiler.cache_key(head, options));
}

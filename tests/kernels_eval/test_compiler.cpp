#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "crucible/eval/compile_cache.h"
#include "crucible/eval/compiler.h"
#include "crucible/eval/evaluator.h"
#include "crucible/eval/landlock.h"
#include "crucible/eval/subprocess.h"
#include "support.h"

using namespace crucible;

namespace {
const char* kRelu = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
  for (int64_t i = 0; i < in[0].shape[0] * in[0].shape[1]; ++i) y[i] = x[i] > 0 ? x[i] : 0;
  return 0;
})";
}  // namespace

TEST_CASE("the compile cache hits on the second compile of the same source and flags") {
  test::ScratchDir cache("compile");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::CompileOptions options;
  auto first = compiler.compile(kRelu, options);
  REQUIRE(first.ok());
  CHECK_FALSE(first.cached);
  CHECK(std::filesystem::exists(first.so_path));
  auto second = compiler.compile(kRelu, options);
  REQUIRE(second.ok());
  CHECK(second.cached);
  CHECK(second.hash == first.hash);
  CHECK(second.seconds < first.seconds);

  SUBCASE("different flags are a different entry") {
    eval::CompileOptions other = options;
    other.extra_flags = {"-DVARIANT=1"};
    auto third = compiler.compile(kRelu, other);
    CHECK_FALSE(third.cached);
    CHECK(third.hash != first.hash);
  }
  SUBCASE("a one-character change is a different entry") {
    auto changed = compiler.compile(std::string(kRelu) + "\n", options);
    CHECK_FALSE(changed.cached);
  }
}

TEST_CASE("compile failures are reported with the compiler's log and cached") {
  test::ScratchDir cache("compile-fail");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  auto r = compiler.compile("int crucible_forward( {", {});
  CHECK(r.outcome == eval::CompileResult::Outcome::failed);
  CHECK(r.log.find("error") != std::string::npos);
  auto again = compiler.compile("int crucible_forward( {", {});
  CHECK(again.cached);
  CHECK(again.log == r.log);
}

TEST_CASE("oversized sources are refused before the compiler runs") {
  test::ScratchDir cache("compile-size");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::CompileOptions options;
  options.max_source_bytes = 100;
  auto r = compiler.compile(std::string(200, ' '), options);
  CHECK(r.outcome == eval::CompileResult::Outcome::source_too_large);
}

TEST_CASE("the CUDA backend builds with nvcc where the toolkit exists, GPU or not") {
  if (!std::filesystem::exists("/usr/local/cuda/bin/nvcc")) {
    MESSAGE("SKIPPED: no CUDA toolkit at /usr/local/cuda");
    return;
  }
  test::ScratchDir cache("compile-cuda");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  eval::CompileOptions options;
  options.backend = eval::Backend::cuda;
  const char* source = R"(#include <crucible/kernel.h>
__global__ void relu(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] > 0 ? x[i] : 0; }
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* stream) {
  long n = in[0].shape[0] * in[0].shape[1];
  relu<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
})";
  auto r = compiler.compile(source, options);
  INFO(r.log);
  CHECK(r.ok());
}

TEST_CASE("a candidate that includes a private file gets a compile error naming it, never its contents") {
  if (geteuid() != 0) {
    MESSAGE("skipped: not root (the compiler runs as this user, who may read its own private files; see "
            "docs/evaluation.md)");
    return;
  }
  test::ScratchDir cache("compile-private");
  const auto secret = cache.path() / "secret.txt";
  {
    std::ofstream out(secret);
    out << "TOPSECRET-LINE\n";
  }
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  eval::Compiler compiler(cache.path() / "cache", eval::default_include_dir());
  auto r = compiler.compile("#include \"" + secret.string() + "\"\n", {});
  INFO(r.log);
  CHECK(r.outcome == eval::CompileResult::Outcome::failed);
  CHECK(r.log.find(secret.string()) != std::string::npos);
  CHECK(r.log.find("Permission denied") != std::string::npos);
  CHECK(r.log.find("TOPSECRET") == std::string::npos);
  CHECK(r.log.rfind("candidate.cpp:", 0) == 0);  // the author's file name, not a build path
}

TEST_CASE("the compiler reaches its toolchain and build directory only: a world-readable file elsewhere is refused") {
  if (eval::landlock_abi() == 0) {
    MESSAGE("skipped: this kernel has no Landlock; the compiler may read any file its identity can "
            "(docs/evaluation.md)");
    return;
  }
  test::ScratchDir cache("compile-landlock");
  const auto open_dir = cache.path() / "open";
  std::filesystem::create_directories(open_dir);
  const auto secret = open_dir / "readable.h";
  {
    std::ofstream out(secret);
    out << "WORLD_READABLE_LINE\n";
  }
  namespace fsp = std::filesystem;
  // Readable by anyone, nobody included; the directories above the scratch directory get their modes back.
  std::vector<std::pair<fsp::path, fsp::perms>> restore;
  for (auto p = open_dir; p != p.root_path(); p = p.parent_path()) {
    restore.emplace_back(p, fsp::status(p).permissions());
    fsp::permissions(p, fsp::perms::others_exec | fsp::perms::others_read, fsp::perm_options::add);
  }
  fsp::permissions(secret, fsp::perms::others_read, fsp::perm_options::add);
  eval::Compiler compiler(cache.path() / "cache", eval::default_include_dir());
  auto r = compiler.compile("#include \"" + secret.string() + "\"\n", {});
  INFO(r.log);
  CHECK(r.outcome == eval::CompileResult::Outcome::failed);
  CHECK(r.log.find(secret.string()) != std::string::npos);
  CHECK(r.log.find("WORLD_READABLE") == std::string::npos);
  // The same source compiles its contract header and system headers: the toolchain is reachable.
  CHECK(compiler.compile(std::string("#include <cmath>\n#include <vector>\n") + kRelu, {}).ok());
  for (const auto& [path, mode] : restore) fsp::permissions(path, mode, fsp::perm_options::replace);
}

TEST_CASE("Triton build directories count in the cache's bound: oldest pruned first, one in use kept, all cleared") {
  namespace fsp = std::filesystem;
  test::ScratchDir cache("compile-lru-triton");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  auto object = compiler.compile(kRelu, {});
  REQUIRE(object.ok());
  auto make_build = [&](char digit, std::chrono::minutes age) {
    const auto dir = cache.path() / "triton" / std::string(64, digit);
    fsp::create_directories(dir / "triton-cache");
    std::ofstream(dir / "triton-cache" / "kernel.cubin", std::ios::binary) << std::string(100000, 'x');
    fsp::last_write_time(dir, fsp::file_time_type::clock::now() - age);
    return dir;
  };
  const auto old_build = make_build('a', std::chrono::minutes(120));
  const auto recent_build = make_build('b', std::chrono::minutes(1));  // may be in use: never pruned
  const auto warm = cache.path() / "triton" / "worker-warm";            // the worker's own cache: not an entry
  fsp::create_directories(warm);
  std::ofstream(warm / "launcher.so") << "warm";
  fsp::last_write_time(object.so_path, fsp::file_time_type::clock::now() - std::chrono::minutes(60));

  auto stats = eval::cache_stats(cache.path());
  CHECK(stats.objects == 1);
  CHECK(stats.triton_builds == 2);
  CHECK(stats.bytes >= 200000);
  CHECK(eval::prune_cache(cache.path(), stats.bytes - 50000) == 1);  // the oldest entry, the old build
  CHECK_FALSE(fsp::exists(old_build));
  CHECK(fsp::exists(object.so_path));
  CHECK(eval::prune_cache(cache.path(), 0) == 1);  // the object goes; the recent build stays
  CHECK_FALSE(fsp::exists(object.so_path));
  CHECK(fsp::exists(recent_build));
  CHECK(eval::clear_cache(cache.path()) == 1);
  CHECK_FALSE(fsp::exists(recent_build));
  CHECK(fsp::exists(warm / "launcher.so"));
}

TEST_CASE("a compiler that cannot run is the machine's failure, not the candidate's, and is not cached") {
  test::ScratchDir cache("compile-env");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  setenv("CRUCIBLE_CXX", "/nonexistent/g++", 1);
  auto r = compiler.compile(kRelu, {});
  unsetenv("CRUCIBLE_CXX");
  CHECK(r.outcome == eval::CompileResult::Outcome::environment_error);
  CHECK_FALSE(r.cached);
  // Once the compiler is back, the same source compiles: nothing was cached against it.
  eval::Compiler again(cache.path(), eval::default_include_dir());
  auto ok = again.compile(kRelu, {});
  CHECK(ok.ok());
}

TEST_CASE("the compile cache is pruned least recently used first, and can be cleared") {
  test::ScratchDir cache("compile-lru");
  eval::Compiler compiler(cache.path(), eval::default_include_dir());
  auto a = compiler.compile(kRelu, {});
  auto b = compiler.compile(std::string(kRelu) + "\n// b", {});
  auto c = compiler.compile(std::string(kRelu) + "\n// c", {});
  REQUIRE((a.ok() && b.ok() && c.ok()));
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::hours(1);
  std::filesystem::last_write_time(a.so_path, old - std::chrono::minutes(2));
  std::filesystem::last_write_time(b.so_path, old - std::chrono::minutes(1));
  std::filesystem::last_write_time(c.so_path, old);
  CHECK(compiler.compile(kRelu, {}).cached);  // a hit: a is now the most recently used
  auto stats = eval::cache_stats(cache.path());
  CHECK(stats.objects == 3);
  const auto one = std::filesystem::file_size(a.so_path);
  CHECK(eval::prune_cache(cache.path(), stats.bytes - one / 2) == 1);  // one entry must go: the oldest, b
  CHECK(std::filesystem::exists(a.so_path));
  CHECK_FALSE(std::filesystem::exists(b.so_path));
  CHECK(std::filesystem::exists(c.so_path));
  CHECK(eval::clear_cache(cache.path()) == 2);
  CHECK(eval::cache_stats(cache.path()).objects == 0);
}

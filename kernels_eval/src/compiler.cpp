#include "crucible/eval/compiler.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"

namespace crucible::eval {
namespace fs = std::filesystem;
namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file_atomically(const fs::path& target, const std::string& data) {
  fs::path tmp = target;
  tmp += ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << data;
  }
  fs::rename(tmp, target);
}

std::string nvcc_path() {
  if (const char* env = std::getenv("CRUCIBLE_NVCC")) return env;
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "nvcc";
}

std::string cxx_path() {
  if (const char* env = std::getenv("CRUCIBLE_CXX")) return env;
  return "g++";
}

// Keep the head of a compiler log, where the first error usually is. The compiler copies the candidate's bytes
// (a #warning, a quoted line) verbatim, so the excerpt is made valid UTF-8 and never cut inside a character.
std::string excerpt(const std::string& log, std::size_t max = 4000) {
  if (log.size() <= max) return valid_utf8(log);
  return valid_utf8_prefix(log, max) + "\n[... " + std::to_string(log.size() - max) + " more bytes]";
}

}  // namespace

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256 failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 15]);
  }
  return out;
}

fs::path default_cache_dir() {
  if (const char* env = std::getenv("CRUCIBLE_CACHE_DIR")) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return fs::path(xdg) / "crucible";
  if (const char* home = std::getenv("HOME")) return fs::path(home) / ".cache" / "crucible";
  return fs::temp_directory_path() / "crucible-cache";
}

Compiler::Compiler(fs::path cache_dir, fs::path include_dir)
    : cache_dir_(std::move(cache_dir)), include_dir_(std::move(include_dir)) {
  header_text_ = read_file(include_dir_ / "crucible" / "kernel.h");
}

std::vector<std::string> Compiler::flags(const CompileOptions& o) const {
  std::vector<std::string> f;
  if (o.backend == "cpu") {
    // Hidden visibility keeps everything but the contract's entry points out of the export table;
    // -fno-gnu-unique stops static locals of inline functions from becoming global unique symbols.
    f = {cxx_path(), "-std=c++17", "-O3", "-march=native", "-fPIC", "-shared", "-fvisibility=hidden",
         "-fvisibility-inlines-hidden", "-fno-gnu-unique", "-I" + include_dir_.string()};
  } else if (o.backend == "cuda") {
    // The CUDA runtime is linked as a shared library so that what a candidate calls from it shows up by
    // name in its import table, where the static gate can judge it (statically linked, cudart's own
    // imports of threads, files and sockets would hide the candidate's).
    f = {nvcc_path(), "-std=c++17", "-O3", "-arch=" + o.cuda_arch, "-shared", "-cudart", "shared",
         "-Xcompiler", "-fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden,-fno-gnu-unique",
         "-I" + include_dir_.string()};
  } else {
    throw std::invalid_argument("unknown compile backend '" + o.backend + "'");
  }
  f.insert(f.end(), o.extra_flags.begin(), o.extra_flags.end());
  return f;
}

const std::string& Compiler::compiler_version(const std::string& backend) {
  std::lock_guard lock(mutex_);
  auto it = versions_.find(backend);
  if (it != versions_.end()) return it->second;
  std::string tool = backend == "cuda" ? nvcc_path() : cxx_path();
  ProcessLimits limits;
  limits.wall_seconds = 20;
  ProcessResult r = run_process({tool, "--version"}, limits);
  return versions_[backend] = r.ok() ? r.output : "unknown " + tool;
}

std::string Compiler::cache_key(const std::string& source, const CompileOptions& o) {
  std::string material = source;
  material += '\0';
  for (const auto& flag : flags(o)) material += flag + '\n';
  material += '\0' + compiler_version(o.backend) + '\0' + header_text_;
  return sha256_hex(material);
}

CompileResult Compiler::compile(const std::string& source, const CompileOptions& o) {
  auto start = std::chrono::steady_clock::now();
  CompileResult result;
  auto finish = [&]() -> CompileResult {
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  if (source.size() > o.max_source_bytes) {
    result.outcome = CompileResult::Outcome::source_too_large;
    result.log = "source is " + std::to_string(source.size()) + " bytes; the limit is " +
                 std::to_string(o.max_source_bytes);
    return finish();
  }
  result.hash = cache_key(source, o);
  fs::path dir = cache_dir_ / result.hash.substr(0, 2);
  fs::create_directories(dir);
  fs::path so = dir / (result.hash + ".so");
  fs::path failure = dir / (result.hash + ".fail");
  result.so_path = so;
  if (fs::exists(so)) {
    result.outcome = CompileResult::Outcome::ok;
    result.cached = true;
    return finish();
  }
  if (fs::exists(failure)) {
    result.outcome = CompileResult::Outcome::failed;
    result.cached = true;
    result.log = valid_utf8(read_file(failure));  // a failure cached before logs were made valid
    return finish();
  }

  // Build in a private directory, then publish with a rename so concurrent compiles never see half a file.
  fs::path work = dir / (result.hash + ".build" + std::to_string(getpid()) + "-" +
                         std::to_string(std::random_device{}()));
  fs::create_directories(work);
  fs::path src = work / (o.backend == "cuda" ? "candidate.cu" : "candidate.cpp");
  write_file_atomically(src, source);
  std::vector<std::string> argv = flags(o);
  argv.insert(argv.end(), {src.string(), "-o", (work / "candidate.so").string()});

  ProcessLimits limits;
  limits.wall_seconds = o.time_limit_s;
  limits.address_space_bytes = o.backend == "cuda" ? 0 : o.memory_limit_bytes;  // nvcc reserves huge VM
  limits.file_size_bytes = o.max_binary_bytes;
  // Compiles are throughput work; timing runs on the same cores and must not wait for them.
  limits.nice = 10;
  ProcessResult r = run_process(argv, limits, work.string());

  if (r.timed_out) {
    result.outcome = CompileResult::Outcome::timed_out;
    result.log = "compile time limit of " + std::to_string(o.time_limit_s) + " s exceeded\n" + excerpt(r.output);
  } else if (!r.ok() || !fs::exists(work / "candidate.so")) {
    result.outcome = CompileResult::Outcome::failed;
    result.log = excerpt(r.output);
    // Deterministic failures are cached too; a compiler that ran out of memory or crashed may not fail
    // next time, so those are not.
    bool transient = r.signal != 0 || r.output.find("Killed signal") != std::string::npos ||
                     r.output.find("internal compiler error") != std::string::npos ||
                     r.output.find("out of memory") != std::string::npos ||
                     r.output.find("memory exhausted") != std::string::npos;
    if (r.signal) result.log += "\ncompiler killed by signal " + std::to_string(r.signal) + " (memory or size limit)";
    if (!transient) write_file_atomically(failure, result.log);
  } else {
    fs::rename(work / "candidate.so", so);
    result.outcome = CompileResult::Outcome::ok;
    result.log = excerpt(r.output);
  }
  std::error_code ignored;
  fs::remove_all(work, ignored);
  return finish();
}

}  // namespace crucible::eval

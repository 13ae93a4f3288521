#include "crucible/eval/compiler.h"

#include <openssl/evp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "crucible/eval/compile_cache.h"
#include "crucible/eval/scratch_dirs.h"
#include "cuda_split_build.h"
#include "file_io.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/utf8_text.h"

namespace crucible::eval {
namespace fs = std::filesystem;
namespace {

std::string nvcc_path() {
  if (const char* env = std::getenv("CRUCIBLE_NVCC")) return env;
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "nvcc";
}

std::string cxx_path() {
  if (const char* env = std::getenv("CRUCIBLE_CXX")) return env;
  return "g++";
}

// The NVRTC helper for split CUDA builds; empty where it was not built (nvcc -cubin takes the device half).
std::string nvrtc_path() {
  if (const char* env = std::getenv("CRUCIBLE_NVRTC")) return env;
#ifdef CRUCIBLE_NVRTC_DEFAULT_PATH
  if (fs::exists(CRUCIBLE_NVRTC_DEFAULT_PATH)) return CRUCIBLE_NVRTC_DEFAULT_PATH;
#endif
  return {};
}

// A compile runs in a private directory holding the candidate, the contract header and the linker's version script,
// named relative to it: compiler messages name the candidate's file as its author would, and nothing else of the
// machine needs to be reachable beyond the toolchain.
constexpr const char* kIncludeDir = "include";
// Pruning walks the whole cache: done every so many new entries (and after any large one), not after each.
constexpr int kPruneEvery = 32;
constexpr const char* kExportsFile = "exports.map";
// Only the contract's entry point is exported; everything else the candidate defines (out-of-line template code of
// namespace std included, which has default visibility) stays local, so nothing it defines can interpose on the
// harness.
constexpr const char* kExportsScript = "{\n  global: crucible_forward;\n  local: *;\n};\n";
// A Python extension module (a KernelBench candidate's load_inline sources) exports its module's PyInit_ alone.
constexpr const char* kExtensionExportsScript = "{\n  global: PyInit_*;\n  local: *;\n};\n";

// What a compiler may reach (Landlock): the system's programs and libraries, a CUDA toolkit installed elsewhere
// (the tree above .../bin/nvcc, recognised by its nvvm/ directory; nothing else outside /usr is granted, so a g++ in
// a home directory or a Python environment does not open that tree), its build directory (which holds the contract
// header) and /dev/null. Not /etc beyond the linker's cache, not /home, /root, /tmp or /proc: an #include of
// anything else fails as a missing or unreadable file, and its contents never reach the log.
FileRules toolchain_files(const std::string& tool, const fs::path& work) {
  FileRules rules;
  std::error_code ec;
  // Our own NVRTC helper may live in a build tree: that one file, not its directory.
  if (const fs::path helper = fs::canonical(tool, ec); !ec && helper.filename() == "crucible-nvrtc")
    rules.read_only.push_back(helper.string());
  for (auto& path : system_files()) rules.read_only.push_back(std::move(path));
  const fs::path driver = fs::canonical(tool, ec);
  const fs::path toolkit = driver.parent_path().parent_path();
  if (!ec && driver.filename() == "nvcc" && toolkit != driver.root_path() && fs::is_directory(toolkit / "nvvm", ec))
    rules.read_only.push_back(toolkit.string());
  const fs::path nvcc_toolkit = fs::canonical(nvcc_path(), ec).parent_path().parent_path();
  if (!ec && fs::path(tool).filename() == "crucible-nvrtc" && fs::is_directory(nvcc_toolkit / "nvvm", ec))
    rules.read_only.push_back(nvcc_toolkit.string());  // NVRTC's builtins library and the toolkit's headers
  rules.read_write = {work.string(), "/dev/null"};
  return rules;
}

std::string resolve_in_path(const std::string& tool) {
  if (tool.find('/') != std::string::npos) return tool;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((fs::path(dir) / tool).c_str(), X_OK) == 0) return (fs::path(dir) / tool).string();
  return tool;
}

// Failures of the machine rather than the candidate: not its verdict, and never cached.
std::string environment_failure(const ProcessResult& r) {
  if (r.exit_code == ProcessResult::kCannotExecute && r.signal == 0) return "the compiler could not be started";
  if (r.exit_code == ProcessResult::kCannotSetIdentity && r.signal == 0)
    return "the compiler could not take its unprivileged identity";
  if (r.exit_code == ProcessResult::kCannotConfine && r.signal == 0)
    return "the compiler could not be confined to its toolchain (Landlock)";
  if (r.exit_code == ProcessResult::kCannotEnterDirectory && r.signal == 0)
    return "the compiler could not enter its build directory";
  if (r.output.find("No space left on device") != std::string::npos) return "the disk is full (No space left on device)";
  if (r.output.find("Disk quota exceeded") != std::string::npos) return "the disk quota is exceeded";
  if (r.signal == SIGKILL || r.signal == SIGTERM || r.signal == SIGINT || r.signal == SIGHUP)
    return "the compiler was killed from outside (signal " + std::to_string(r.signal) + ")";
  return {};
}

// Keep the head of a compiler log, where the first error usually is. The compiler copies the candidate's bytes
// (a #warning, a quoted line) verbatim, so the excerpt is made valid UTF-8 and never cut inside a character.
std::string excerpt(const std::string& log, std::size_t max = 4000) {
  if (log.size() <= max) return valid_utf8(log);
  return valid_utf8_prefix(log, max) + "\n[... " + std::to_string(log.size() - max) + " more bytes]";
}

// Where the toolkit that nvcc belongs to keeps its headers and libraries.
fs::path toolkit_dir() {
  std::error_code ec;
  fs::path nvcc = fs::canonical(resolve_in_path(nvcc_path()), ec);
  return ec ? fs::path("/usr/local/cuda") : nvcc.parent_path().parent_path();
}

fs::path toolkit_lib_dir() {
  const fs::path root = toolkit_dir();
  for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib"})
    if (fs::exists(root / sub / "libcudart.so")) return root / sub;
  return root / "lib64";
}


// The C++ compiler of a CPU build or a split build's host half.
std::string host_cxx(const CompileOptions& o) { return o.cxx.empty() ? cxx_path() : o.cxx; }

// The tools and flags of a split CUDA build for these options.
SplitToolchain split_toolchain(const CompileOptions& o) {
  SplitToolchain tools{nvcc_path(), host_cxx(o), nvrtc_path(), o.cuda_arch, toolkit_dir() / "include", toolkit_lib_dir(),
                       o.python_extension ? std::vector<std::string>{} : o.extra_flags};
  tools.python_extension = o.python_extension;
  tools.host_flags = o.split_extras.host;
  tools.device_flags = o.split_extras.device;
  tools.link_flags = o.split_extras.link;
  return tools;
}

}  // namespace

// Every directory above `path` can be searched by others, and the file itself read and run by them: an unprivileged
// compiler can run from here. Also used by the KernelBench build (kernelbench_build.cpp).
bool reachable_by_others(const fs::path& path) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  if (ec) return false;
  if ((fs::status(p, ec).permissions() & fs::perms::others_exec) == fs::perms::none) return false;
  for (p = p.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
    if ((fs::status(p, ec).permissions() & fs::perms::others_exec) == fs::perms::none) return false;
  return true;
}

const char* to_string(CompilePath path) {
  switch (path) {
    case CompilePath::whole: return "whole";
    case CompilePath::split_nvrtc: return "split_nvrtc";
    case CompilePath::split_nvcc: return "split_nvcc";
  }
  return "whole";
}

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
  fast_launch_text_ = read_file(include_dir_ / "crucible" / "fast_launch.h");
}

std::vector<std::string> Compiler::flags(const CompileOptions& o) const {
  std::vector<std::string> f;
  if (o.backend == Backend::cpu) {
    // Hidden visibility keeps everything but the contract's entry points out of the export table;
    // -fno-gnu-unique stops static locals of inline functions from becoming global unique symbols.
    f = {host_cxx(o), "-std=c++17", "-O3", "-march=native", "-fPIC", "-shared", "-fvisibility=hidden",
         "-fvisibility-inlines-hidden", "-I" + std::string(kIncludeDir),
         "-Wl,--version-script=" + std::string(kExportsFile)};
    if (!is_clang(f.front())) f.insert(f.begin() + 8, "-fno-gnu-unique");  // clang makes no unique symbols
  } else {
    // The CUDA runtime is linked as a shared library so that what a candidate calls from it shows up by
    // name in its import table, where the static gate can check it (statically linked, cudart's own
    // imports of threads, files and sockets would hide the candidate's).
    f = {nvcc_path(), "-std=c++17", "-O3", "-arch=" + o.cuda_arch, "-shared", "-cudart", "shared",
         "-Xcompiler", "-fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden,-fno-gnu-unique",
         "-I" + std::string(kIncludeDir), "-Xlinker", "--version-script=" + std::string(kExportsFile)};
  }
  f.insert(f.end(), o.extra_flags.begin(), o.extra_flags.end());
  return f;
}

std::vector<std::string> Compiler::split_host_flags(const CompileOptions& o) const {
  return split_host_command(split_toolchain(o));
}

const std::string& Compiler::compiler_version(const std::string& tool) {
  std::lock_guard lock(mutex_);
  auto it = versions_.find(tool);
  if (it != versions_.end()) return it->second;
  ProcessLimits limits;
  limits.wall_seconds = 20;
  ProcessResult r = run_process({tool, "--version"}, limits);
  return versions_[tool] = r.ok() ? r.output : "unknown " + tool;
}

std::string Compiler::cache_key(const std::string& source, const CompileOptions& o) {
  std::string material = source;
  material += '\0';
  for (const auto& flag : flags(o)) material += flag + '\n';
  material += '\0' + compiler_version(o.backend == Backend::cuda ? nvcc_path() : host_cxx(o)) + '\0' + header_text_;
  // A split build is another build of the same source: its own entry (benchmarks compare the two).
  if (o.backend == Backend::cuda && o.split_cuda)  // the host half is host_cxx's
    material += std::string("\0split\0", 7) + fast_launch_text_ + '\0' + compiler_version(host_cxx(o)) + nvrtc_path();
  for (const auto* flags : {&o.split_extras.host, &o.split_extras.device, &o.split_extras.link})
    for (const auto& flag : *flags) material += '\0' + flag;
  return sha256_hex(material);
}

namespace {

// Where a build's outcome is kept: the shared object, or the log of a deterministic failure.
struct CacheEntry {
  fs::path so, failure;
};

CacheEntry cache_entry(const fs::path& cache_dir, const std::string& hash) {
  const fs::path dir = cache_dir / hash.substr(0, 2);
  fs::create_directories(dir);
  return {dir / (hash + ".so"), dir / (hash + ".fail")};
}

// True when the cache already holds the outcome (built, or failed for good), which `result` then carries.
bool from_cache(const CacheEntry& entry, CompileResult& result) {
  if (fs::exists(entry.so)) {
    touch_cache_entry(entry.so);
    result.outcome = CompileResult::Outcome::ok;
    result.cached = true;
    return true;
  }
  if (!fs::exists(entry.failure)) return false;
  touch_cache_entry(entry.failure);
  result.outcome = CompileResult::Outcome::failed;
  result.cached = true;
  result.log = valid_utf8(read_file(entry.failure));  // a failure cached before logs were made valid
  return true;
}

const char* source_name(const CompileOptions& o) {
  return o.backend == Backend::cuda ? "candidate.cu" : "candidate.cpp";
}

// The build directory: the contract's headers, the export script and the source, owned by the unprivileged
// identity when the compiler runs as it. Throws what went wrong.
void prepare_build_dir(const fs::path& work, const std::string& source, const CompileOptions& o, bool unprivileged,
                       const std::string& header_text, const std::string& fast_launch_text) {
  fs::create_directories(work / kIncludeDir / "crucible");
  write_file_atomically(work / kIncludeDir / "crucible" / "kernel.h", header_text);
  if (o.backend == Backend::cuda)
    write_file_atomically(work / kIncludeDir / "crucible" / "fast_launch.h", fast_launch_text);
  write_file_atomically(work / kExportsFile, o.python_extension ? kExtensionExportsScript : kExportsScript);
  write_file_atomically(work / source_name(o), source);
  if (unprivileged && chown(work.c_str(), kUnprivilegedId, kUnprivilegedId) != 0)
    throw std::runtime_error(std::string("chown: ") + std::strerror(errno));
}

}  // namespace

// Compiles are throughput work and must not disturb this process's timing, yet must not starve under other load.
// CPU candidates are timed on these cores: the compile stops while that happens. CUDA candidates are timed on the
// GPU and builds overlap that timing on purpose; nice keeps them off the launching thread's core.
void set_build_priority(ProcessLimits& limits, Backend backend) {
  limits.nice = backend == Backend::cuda ? 10 : 0;
  limits.pausable = backend != Backend::cuda;
}

namespace {

// Every compiler step runs the same way: limits, an unprivileged identity, a scrubbed environment, Landlock.
ProcessResult run_compiler_step(const std::vector<std::string>& step, const CompileOptions& o, const fs::path& work,
                                bool unprivileged) {
  std::vector<std::string> argv = step;
  argv.front() = resolve_in_path(argv.front());
  ProcessLimits limits;
  limits.wall_seconds = o.time_limit_s;
  limits.address_space_bytes = o.backend == Backend::cuda ? 0 : o.memory_limit_bytes;  // nvcc reserves huge VM
  limits.file_size_bytes = o.max_binary_bytes;
  set_build_priority(limits, o.backend);
  limits.unprivileged = unprivileged && reachable_by_others(argv.front());
  // Nothing of the evaluator's environment (tokens, proxies, paths to private files) reaches the compiler.
  limits.environment = {"PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + work.string(),
                        "TMPDIR=" + work.string(), "LC_ALL=C"};
  limits.files = toolchain_files(argv.front(), work);
  for (const auto& dir : o.read_only_dirs) limits.files->read_only.push_back(dir);  // a Python extension's headers
  return run_process(argv, limits, work.string());
}

// The build: a CUDA candidate in two halves where the source allows it, else one compiler run over the whole file.
ProcessResult build(const std::string& source, const CompileOptions& o, const std::vector<std::string>& whole,
                    const fs::path& work, bool unprivileged, CompileResult& result) {
  auto run_step = [&](const std::vector<std::string>& step) { return run_compiler_step(step, o, work, unprivileged); };
  if (o.backend == Backend::cuda && o.split_cuda) {
    SplitBuild split = build_split(source, split_toolchain(o), work, run_step);
    result.path = split.path;
    result.whole_because = split.why_not;
    if (split.kind == SplitBuild::Kind::device_failed) return split.failure;
    if (split.kind == SplitBuild::Kind::built) {
      ProcessResult r;
      r.exit_code = 0;
      r.output = split.log;
      return r;
    }
  }
  std::vector<std::string> argv = whole;
  argv.insert(argv.end(), {source_name(o), "-o", "candidate.so"});
  return run_step(argv);
}

// A build that did not produce the shared object: the environment's fault, the time limit, or the candidate's
// (cached when deterministic: a compiler that ran out of memory or crashed may not fail next time).
void record_failure(const ProcessResult& r, const CompileOptions& o, const fs::path& failure_file,
                    CompileResult& result) {
  const std::string environment = r.timed_out ? std::string() : environment_failure(r);
  if (!environment.empty()) {
    result.outcome = CompileResult::Outcome::environment_error;
    result.log = environment + "\n" + excerpt(r.output);
    return;
  }
  if (r.timed_out) {
    result.outcome = CompileResult::Outcome::timed_out;
    result.log = "compile time limit of " + std::to_string(o.time_limit_s) + " s exceeded\n" + excerpt(r.output);
    return;
  }
  result.outcome = CompileResult::Outcome::failed;
  result.log = excerpt(r.output);
  const bool transient = r.signal != 0 || r.output.find("Killed signal") != std::string::npos ||
                         r.output.find("internal compiler error") != std::string::npos ||
                         r.output.find("out of memory") != std::string::npos ||
                         r.output.find("memory exhausted") != std::string::npos;
  if (r.signal) result.log += "\ncompiler killed by signal " + std::to_string(r.signal) + " (memory or size limit)";
  if (transient) return;
  try {
    write_file_atomically(failure_file, result.log);
  } catch (const std::exception&) {  // a full cache disk loses the record, not the verdict
  }
}

// Copied into the cache beside its final name, then renamed: the build directory may be on another file system.
// False (and `result` says why) when the cache cannot take it.
bool store_built(const fs::path& work, const fs::path& so, CompileResult& result) {
  fs::path staged = so;
  staged += ".tmp" + std::to_string(getpid());
  std::error_code ec, ignored;
  fs::copy_file(work / "candidate.so", staged, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(staged, so, ec);
  if (!ec) return true;
  fs::remove(staged, ignored);
  result.outcome = CompileResult::Outcome::environment_error;
  result.log = "cannot store the compiled candidate in the cache: " + ec.message();
  return false;
}

}  // namespace

CompileResult Compiler::compile(const std::string& source, const CompileOptions& o) {
  const auto start = std::chrono::steady_clock::now();
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
  const CacheEntry entry = cache_entry(cache_dir_, result.hash);
  result.so_path = entry.so;
  if (from_cache(entry, result)) return finish();

  // Build in a private directory, then publish with a rename so concurrent compiles never see half a file.
  fs::path work;
  try {
    work = make_scratch_dir("compile");
  } catch (const std::exception& e) {
    result.outcome = CompileResult::Outcome::environment_error;
    result.log = e.what();
    return finish();
  }
  std::error_code ignored;
  auto cleanup = [&] { fs::remove_all(work, ignored); };
  const std::vector<std::string> whole = flags(o);
  // As root, the compiler runs as nobody when it can reach its toolchain that way (docs/evaluation.md).
  const bool unprivileged = geteuid() == 0 && reachable_by_others(resolve_in_path(whole.front()));
  try {
    prepare_build_dir(work, source, o, unprivileged, header_text_, fast_launch_text_);
  } catch (const std::exception& e) {
    cleanup();
    result.outcome = CompileResult::Outcome::environment_error;
    result.log = std::string("cannot prepare the build directory: ") + e.what();
    return finish();
  }
  const ProcessResult r = build(source, o, whole, work, unprivileged, result);
  const bool failed = r.timed_out || !environment_failure(r).empty() || !r.ok() || !fs::exists(work / "candidate.so");
  if (failed) {
    record_failure(r, o, entry.failure, result);
  } else if (store_built(work, entry.so, result)) {
    result.outcome = CompileResult::Outcome::ok;
    result.log = excerpt(r.output);
    prune_after_store(entry.so);
  }
  cleanup();
  return finish();
}

// The new entry is the newest: pruning never takes it.
void Compiler::prune_after_store(const fs::path& so) {
  std::error_code ec;
  if (++compiles_since_prune_ >= kPruneEvery || fs::file_size(so, ec) > (std::uintmax_t{16} << 20)) {
    compiles_since_prune_ = 0;
    prune_cache(cache_dir_, max_cache_bytes_);
  }
}

}  // namespace crucible::eval

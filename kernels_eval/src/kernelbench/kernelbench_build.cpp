// A KernelBench-format candidate's build: gate and extraction (Python's ast, in a process of its own), each extracted
// extension compiled by Crucible's compiler against the worker's PyTorch with a precompiled torch/extension.h, and
// the symbol gate on every module built.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <cctype>
#include <map>
#include <set>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "crucible/eval/eval_settings.h"
#include "crucible/eval/kernelbench_candidate.h"
#include "crucible/eval/scratch_dirs.h"
#include "crucible/eval/static_gate.h"
#include "crucible/eval/subprocess.h"
#include "crucible/eval/triton_candidate.h"
#include "crucible/eval/utf8_text.h"
#include "elf_symbols.h"
#include "cuda_split_build.h"
#include "extension_headers.h"
#include "file_io.h"

namespace crucible::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Defined beside the compiler (compiler.cpp), which decides by it whether it may run as nobody.
bool reachable_by_others(const fs::path& path);

namespace {

// The analysis's JSON (the last line that is one), or nothing with `error` set.
std::optional<json> run_analysis(const std::string& python, const fs::path& candidate,
                                 const KernelBenchBuildOptions& options, const fs::path& out, std::string& error) {
  std::string dtypes;
  for (DType d : options.dtypes) dtypes += (dtypes.empty() ? "" : ",") + std::string(dtype_name(d));
  std::vector<std::string> argv{python, "-I", (default_python_dir() / "crucible_kernelbench" / "analyze.py").string(),
                                candidate.string(), "--dtypes", dtypes, "--torch-ops",
                                std::string(torch_ops_name(options.forbid_torch_ops))};
  if (!out.empty()) argv.insert(argv.end(), {"--out", out.string()});
  else argv.push_back("--units");
  ProcessLimits limits;
  limits.wall_seconds = 30.0;
  limits.address_space_bytes = std::size_t{2} << 30;
  limits.max_output_bytes = 4 << 20;
  limits.environment = {"PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"};
  ProcessResult r = run_process(argv, limits);
  std::optional<json> found;
  std::stringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{')
      if (json j = json::parse(line, nullptr, false); !j.is_discarded()) found = std::move(j);
  if (!r.ok() || !found) error = "the KernelBench analysis did not run: " + valid_utf8(r.output.substr(0, 500));
  return r.ok() ? found : std::nullopt;
}

std::vector<Reason> refusals_of(const json& analysis) {
  std::vector<Reason> refusals;
  for (const auto& x : analysis["refusals"])
    refusals.push_back(reason_from_text(x["code"].get<std::string>(), valid_utf8(x["detail"].get<std::string>())));
  return refusals;
}

// What every compile of an extension needs beyond the compiler's own flags: the PyTorch and Python headers of the
// worker's interpreter and its C++ ABI.
std::vector<std::string> header_flags(const KernelBenchPython& python) {
  std::vector<std::string> flags;
  for (const auto& dir : python.include_dirs) {  // two arguments: nvcc refuses "-isystemDIR", g++ takes either
    flags.push_back("-isystem");
    flags.push_back(dir);
  }
  flags.push_back("-D_GLIBCXX_USE_CXX11_ABI=" + std::to_string(python.cxx11_abi));
  flags.push_back("-DTORCH_API_INCLUDE_EXTENSION_H");
  return flags;
}

// The libraries of the worker's PyTorch (found already loaded by the worker, by soname), as g++ takes them.
std::vector<std::string> library_flags(const KernelBenchPython& python, bool cuda) {
  std::vector<std::string> flags{"-Wl,--no-as-needed"};
  for (const auto& dir : python.library_dirs) flags.push_back("-L" + dir);
  for (const char* lib : {"-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"}) flags.push_back(lib);
  if (cuda)
    for (const char* lib : {"-lc10_cuda", "-ltorch_cuda"}) flags.push_back(lib);
  return flags;
}

CompileOptions extension_options(const KernelBenchPython& python, const KernelBenchBuildOptions& options, bool cuda) {
  CompileOptions o;
  o.backend = cuda ? Backend::cuda : Backend::cpu;
  o.cuda_arch = options.cuda_arch;
  o.python_extension = true;
  o.time_limit_s = options.time_limit_s;
  o.max_source_bytes = options.max_source_bytes;
  o.extra_flags = header_flags(python);
  o.read_only_dirs = python.include_dirs;
  for (const auto& dir : python.library_dirs) o.read_only_dirs.push_back(dir);
  // CUDA: in halves where the source allows (the host half by g++, with the precompiled header), else the whole unit
  // by nvcc.
  o.split_cuda = cuda;
  if (cuda) o.split_extras = {header_flags(python), header_flags(python), library_flags(python, true)};
  return o;
}

// The whole build links the libraries too (nvcc passes linker flags on with -Xlinker).
void add_link_flags(const KernelBenchPython& python, CompileOptions& o) {
  const bool cuda = o.backend == Backend::cuda;
  for (const auto& flag : library_flags(python, cuda)) {
    if (cuda && flag.rfind("-Wl,", 0) == 0) {
      o.extra_flags.insert(o.extra_flags.end(), {"-Xlinker", flag.substr(4)});
      continue;
    }
    o.extra_flags.push_back(flag);
  }
}

}  // namespace

namespace {

// A whole nvcc build gives each kernel a host function of the kernel's own name and a launch stub named after it
// (`__device_stub__Z1kPf` for `_Z1kPf`; for an extern "C" kernel `c_kernel`, `__device_stub__Z8c_kernelPi`): a name
// counts when both are in the module's symbol table.
std::vector<std::string> kernels_with_launch_stubs(const std::vector<ElfSymbol>& symbols) {
  std::set<std::string> defined;
  for (const auto& s : symbols)
    if (s.defined) defined.insert(s.name);
  const std::string stub = "__device_stub__";
  std::set<std::string> names;
  for (const auto& symbol : defined) {
    const std::size_t at = symbol.find(stub);
    if (at == std::string::npos || at == 0 || !std::isdigit(static_cast<unsigned char>(symbol[at - 1]))) continue;
    std::size_t digits = at;  // the identifier's length precedes it
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(symbol[digits - 1]))) --digits;
    if (at - digits > 6) continue;
    const std::size_t length = std::stoul(symbol.substr(digits, at - digits));
    if (length <= stub.size() || at + length > symbol.size()) continue;
    const std::string inner = symbol.substr(at + stub.size(), length - stub.size());  // "Z1kPf"
    if (defined.count("_" + inner)) names.insert("_" + inner);
    std::size_t p = 1, n = 0;  // an extern "C" kernel: Z<length><name><parameters>
    while (p < inner.size() && std::isdigit(static_cast<unsigned char>(inner[p])) && n < 100000)
      n = n * 10 + static_cast<std::size_t>(inner[p++] - '0');
    if (inner[0] == 'Z' && n > 0 && p + n <= inner.size() && defined.count(inner.substr(p, n)))
      names.insert(inner.substr(p, n));
  }
  return {names.begin(), names.end()};
}

// A split build embeds its cubin (crucible/fast_launch.h): its entry functions are the kernels.
std::vector<std::string> kernels_of_embedded_cubin(const fs::path& so_path) {
  const auto cubin = bytes_at_symbol(so_path, "crucible_fast_cubin");
  if (!cubin) return {};
  std::set<std::string> names;
  for (const auto& s : read_symbol_table_of_image(*cubin))
    if (s.defined && (s.other & kCubinEntryFlag)) names.insert(s.name);
  return {names.begin(), names.end()};
}

}  // namespace

std::vector<std::string> cuda_kernel_names(const fs::path& so_path) {
  try {
    auto names = kernels_of_embedded_cubin(so_path);
    return names.empty() ? kernels_with_launch_stubs(read_symbol_table(so_path)) : names;
  } catch (const std::exception&) {
    return {};  // no names: the profiler's share is then unknown, never wrong
  }
}

namespace {

// Writes the candidate once into its own directory of the cache (the worker reads it there).
fs::path store_candidate(const fs::path& cache_dir, const std::string& source, const KernelBenchPython& python) {
  const fs::path dir = cache_dir / "kernelbench" / sha256_hex(source + "\n" + python.executable + "\n" + python.versions);
  fs::create_directories(dir);
  const fs::path path = dir / "candidate.py";
  if (!fs::exists(path)) {
    const fs::path tmp = dir / ("candidate.py." + std::to_string(getpid()) + ".tmp");
    std::ofstream(tmp, std::ios::binary) << source;
    fs::rename(tmp, path);
  }
  touch_cache_entry(dir);
  return path;
}

// As root, the compiler runs as nobody (compiler.cpp): what it includes must be reachable by others. A compile cache
// private to root (0700) holds a precompiled header the compiler cannot open, and -include of it would fail the
// build: such a header is not used (the build is slower, never wrong).
bool usable_by_compiler(const fs::path& header) {
  return !header.empty() && (geteuid() != 0 || reachable_by_others(header.parent_path()));
}

// The worker's PyTorch headers, where the unprivileged compiler cannot read them (a Python environment under /root):
// not the candidate's fault, so an environment error naming the directory, never a compile error.
std::string unreadable_by_compiler(const std::vector<std::string>& include_dirs) {
  if (geteuid() != 0) return {};
  for (const auto& dir : include_dirs)
    if (fs::exists(dir) && !reachable_by_others(dir))
      return "PyTorch's headers at " + dir + " cannot be read by the compiler, which runs as nobody: install the "
             "worker's Python where others can read it";
  return {};
}

// The CPU's whole build, or the CUDA build's host half (nvcc's chain cannot use a precompiled header).
std::vector<std::string>& host_flags(CompileOptions& o) {
  return o.backend == Backend::cuda ? o.split_extras.host : o.extra_flags;
}

std::vector<std::string> host_command(Compiler& compiler, const CompileOptions& o) {
  return o.backend == Backend::cuda ? compiler.split_host_flags(o) : compiler.flags(o);
}

void use_precompiled_extension_header(Compiler& compiler, CompileOptions& o) {
  const fs::path pch = precompiled_extension_header(compiler, host_command(compiler, o), o.backend);
  if (!usable_by_compiler(pch)) return;
  host_flags(o).insert(host_flags(o).end(), {"-include", pch.string()});
  o.read_only_dirs.push_back(pch.parent_path().string());
}

// The lean kit's headers for every compile of the unit (g++'s, and nvcc's where the build is not split) and its glue
// object for the link. False where there is no usable kit.
bool use_lean_kit(const KernelBenchPython& python, Compiler& compiler, CompileOptions& o) {
  o.cxx = lean_unit_compiler();  // a failed lean build falls back to load_inline's unit with the default compiler
  const auto kit = lean_extension_kit(compiler, host_command(compiler, o), o.backend, python.versions);
  if (!kit || !usable_by_compiler(kit->header)) return false;
  const std::string dir = kit->dir.string(), glue = kit->glue_object.string();
  host_flags(o).insert(host_flags(o).end(), {"-I", dir, "-include", kit->header.string()});
  if (is_clang(o.cxx)) host_flags(o).push_back(kClangValidateContents);
  if (o.backend == Backend::cuda) {
    o.split_extras.device.insert(o.split_extras.device.end(), {"-I", dir});
    o.split_extras.link.insert(o.split_extras.link.begin(), glue);
    o.extra_flags.insert(o.extra_flags.end(), {"-I", dir, glue});
  } else {
    o.extra_flags.push_back(glue);
  }
  o.read_only_dirs.push_back(dir);
  return true;
}

// One extension's unit built: with Crucible's lean bindings where they build (a signature they cannot bind, or a part
// of PyTorch's C++ API beyond torch/types.h, fails that build), else load_inline's unit with pybind11.
CompileResult compile_extension(const KernelBenchPython& python, Compiler& compiler, const KernelBenchBuildOptions& options,
                                const json& ext, CompileOptions o, bool& lean) {
  lean = false;
  if (options.extension_build == ExtensionBuild::lean) {
    CompileOptions with_kit = o;
    if (use_lean_kit(python, compiler, with_kit)) {
      add_link_flags(python, with_kit);
      CompileResult r = compiler.compile(read_file_or_empty(ext["lean_file"].get<std::string>()), with_kit);
      using O = CompileResult::Outcome;
      if (r.outcome != O::failed && r.outcome != O::environment_error) {
        lean = r.ok();
        return r;
      }
    }
  }
  if (options.extension_build != ExtensionBuild::plain) use_precompiled_extension_header(compiler, o);
  add_link_flags(python, o);
  return compiler.compile(read_file_or_empty(ext["file"].get<std::string>()), o);
}

// One extension's unit through the compiler and the symbol gate; false with the build's outcome set otherwise.
bool build_extension(const KernelBenchPython& python, Compiler& compiler, const KernelBenchBuildOptions& options,
                     const json& ext, KernelBenchBuild& b) {
  const bool cuda = ext["cuda"].get<bool>();
  if (cuda && options.backend != Backend::cuda) {
    b.outcome = KernelBenchBuild::Outcome::rejected;
    b.refusals.push_back({ReasonCode::needs_gpu, "load_inline('" + ext["name"].get<std::string>() + "') has cuda_sources: "
                          "it runs on a GPU node (cpp_sources alone run on the CPU)"});
    return false;
  }
  const CompileOptions o = extension_options(python, options, cuda);
  if (const std::string why = unreadable_by_compiler(python.include_dirs); !why.empty()) {
    b.compile.log = why;
    b.outcome = KernelBenchBuild::Outcome::environment_error;
    return false;
  }
  bool lean = false;
  b.compile = compile_extension(python, compiler, options, ext, o, lean);
  b.lean = (b.extensions.empty() || b.lean) && lean;
  switch (b.compile.outcome) {
    case CompileResult::Outcome::ok: break;
    case CompileResult::Outcome::source_too_large: b.outcome = KernelBenchBuild::Outcome::source_too_large; return false;
    case CompileResult::Outcome::environment_error: b.outcome = KernelBenchBuild::Outcome::environment_error; return false;
    default: b.outcome = KernelBenchBuild::Outcome::compile_error; return false;
  }
  GatePolicy policy{options.backend, {}, o.max_binary_bytes};
  policy.python_extension = true;
  b.refusals = check_shared_object(b.compile.so_path, policy);
  if (!b.refusals.empty()) {
    b.outcome = KernelBenchBuild::Outcome::rejected;
    return false;
  }
  b.extensions.push_back({ext["name"].get<std::string>(), ext["functions"].get<std::vector<std::string>>(),
                          b.compile.so_path});
  if (cuda)
    for (auto& name : cuda_kernel_names(b.compile.so_path)) b.cuda_kernels.push_back(std::move(name));
  return true;
}

}  // namespace

KernelBenchBuild build_kernelbench_candidate(const KernelBenchPython& python, Compiler& compiler,
                                             const std::string& source, const KernelBenchBuildOptions& options) {
  KernelBenchBuild b;
  const auto start = std::chrono::steady_clock::now();
  auto done = [&](KernelBenchBuild::Outcome outcome) {
    b.outcome = outcome;
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return b;
  };
  if (source.size() > options.max_source_bytes) {
    b.compile.log = "source is " + std::to_string(source.size()) + " bytes (limit " +
                    std::to_string(options.max_source_bytes) + ")";
    return done(KernelBenchBuild::Outcome::source_too_large);
  }
  const fs::path units = make_scratch_dir("kernelbench");
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{units};
  try {
    b.candidate_path = store_candidate(compiler.cache_dir(), source, python);
  } catch (const std::exception& e) {
    b.compile.log = std::string("cannot store the candidate: ") + e.what();
    return done(KernelBenchBuild::Outcome::environment_error);
  }
  auto analysis = run_analysis(python.executable, b.candidate_path, options, units, b.compile.log);
  if (!analysis) return done(KernelBenchBuild::Outcome::environment_error);
  b.refusals = refusals_of(*analysis);
  b.kernels = (*analysis)["kernels"].get<std::vector<std::string>>();
  if (!b.refusals.empty()) return done(KernelBenchBuild::Outcome::rejected);
  for (const auto& ext : (*analysis)["extensions"])
    if (!build_extension(python, compiler, options, ext, b)) return done(b.outcome);
  return done(KernelBenchBuild::Outcome::ok);
}

std::vector<Reason> kernelbench_analyze(const std::string& python, const std::string& source,
                                        const KernelBenchBuildOptions& options,
                                        std::vector<std::pair<std::string, std::string>>* units, std::string& error) {
  const fs::path dir = make_scratch_dir("kernelbench-gate");
  std::ofstream(dir / "candidate.py", std::ios::binary) << source;
  auto analysis = run_analysis(python, dir / "candidate.py", options, {}, error);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  if (!analysis) return {};
  if (units)
    for (const auto& ext : (*analysis)["extensions"])
      if (ext.contains("unit")) units->emplace_back(ext["name"].get<std::string>(), ext["unit"].get<std::string>());
  return refusals_of(*analysis);
}

}  // namespace crucible::eval

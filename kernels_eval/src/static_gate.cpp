#include "crucible/eval/static_gate.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <set>
#include <string_view>

namespace crucible::eval {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

// Math functions, with their float and long double variants added below.
constexpr std::array kMath{"sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
                           "asinh", "acosh", "atanh", "exp", "exp2", "expm1", "log", "log2", "log10",
                           "log1p", "pow", "sqrt", "cbrt", "hypot", "fabs", "floor", "ceil", "round",
                           "trunc", "fmod", "remainder", "fmin", "fmax", "fdim", "fma", "erf", "erfc",
                           "lgamma", "tgamma", "copysign", "nearbyint", "rint", "lrint", "llrint",
                           "lround", "llround", "ldexp", "frexp", "modf", "scalbn", "logb", "ilogb",
                           "sincos", "nextafter"};

// Everything a numeric kernel legitimately needs from libc / libstdc++ / the C++ ABI runtime.
constexpr std::array kPlainAllowed{
    "memcpy", "memmove", "memset", "memcmp", "memchr", "strlen", "malloc", "free", "calloc", "realloc",
    "aligned_alloc", "posix_memalign", "abort", "__assert_fail", "__stack_chk_fail", "__errno_location",
    "__memcpy_chk", "__memmove_chk", "__memset_chk", "qsort", "bsearch",
    // string functions that only read and write memory they are given
    "strchr", "strrchr", "strstr", "strcmp", "strncmp", "strcpy", "strncpy", "strcat", "strncat", "strnlen",
    "strspn", "strcspn", "strpbrk", "memrchr", "rawmemchr", "__strcpy_chk", "__strncpy_chk", "__strcat_chk",
    "__rawmemchr", "strtol", "strtoul", "strtoll", "strtoull", "strtof", "strtod", "atoi", "atol", "atof",
    "abs", "labs", "llabs", "div", "ldiv",
    // thread-local storage (a scratch buffer per thread; the worker has one thread) and its destructors
    "__tls_get_addr", "__cxa_thread_atexit", "__cxa_thread_atexit_impl",
    // emitted by crtstuff into every shared object
    "__cxa_finalize", "__gmon_start__", "_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable",
    // C++ ABI: exceptions, guarded statics, atexit for static destructors
    "__cxa_allocate_exception", "__cxa_free_exception", "__cxa_throw", "__cxa_begin_catch",
    "__cxa_end_catch", "__cxa_rethrow", "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort",
    "__cxa_atexit", "__cxa_pure_virtual", "__cxa_throw_bad_array_new_length", "__cxa_call_unexpected", "__gxx_personality_v0",
    "_Unwind_Resume", "__cpu_indicator_init", "__cpu_model", "_ZSt9terminatev", "_ZSt7nothrow"};

// CUDA runtime calls a kernel needs on the stream it was given (see the CUDA backend issue).
// (imports of a candidate built with -cudart shared; the launch symbols are CUDA 12 and 13 spellings).
constexpr std::array kCudaAllowed{"cudaLaunchKernel", "__cudaLaunchKernel", "__cudaGetKernel",
                                  "cudaLaunchKernelExC", "cudaGetLastError", "cudaPeekAtLastError",
                                  "cudaGetErrorString", "cudaGetErrorName", "cudaMalloc", "cudaFree",
                                  "cudaMallocAsync", "cudaFreeAsync", "cudaMemsetAsync", "cudaMemcpyAsync",
                                  "cudaFuncSetAttribute", "cudaFuncGetAttributes",
                                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "__cudaRegisterFatBinary",
                                  "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
                                  "__cudaRegisterFunction", "__cudaRegisterVar", "__cudaRegisterManagedVar",
                                  "__cudaInitModule", "__cudaPushCallConfiguration", "__cudaPopCallConfiguration",
                                  "cudaGetDevice", "cudaDeviceGetAttribute",
                                  // split builds load their embedded device code (crucible/fast_launch.h)
                                  "cudaLibraryLoadData", "cudaLibraryGetKernel"};

struct Category {
  std::string_view name;
  std::vector<std::string_view> exact;
  std::vector<std::string_view> prefixes;
};

// Named refusals give a candidate's author (or a policy) a precise reason; anything else that is not
// allowlisted is refused as "not allowlisted".
const std::vector<Category>& forbidden_categories() {
  static const std::vector<Category> categories{
      {"process",
       {"fork", "vfork", "clone", "clone3", "system", "popen", "pclose", "posix_spawn", "posix_spawnp", "kill",
        "wait", "waitpid", "waitid", "_exit", "exit", "_Exit", "quick_exit", "daemon", "setsid", "ptrace",
        "prctl", "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve"},
       {}},
      {"thread", {}, {"pthread_", "thrd_", "_ZNSt6thread", "__gthread", "omp_", "GOMP_", "_ZSt5async"}},
      {"file",
       {"open", "open64", "openat", "creat", "read", "write", "pread", "pwrite", "fopen", "fopen64", "fdopen",
        "freopen", "fread", "fwrite", "fclose", "fflush", "fprintf", "printf", "puts", "putchar", "fputs",
        "fputc", "putc", "getchar", "fgets", "scanf", "fscanf", "perror", "unlink", "remove", "rename", "mkdir",
        "rmdir", "opendir", "readdir", "stat", "lstat", "fstat", "access", "dup", "dup2", "pipe", "mmap",
        "mmap64", "mprotect", "ioctl", "__printf_chk", "__fprintf_chk", "__vfprintf_chk", "vprintf",
        "_IO_putc", "_IO_getc", "stdout", "stderr", "stdin", "ftruncate", "memfd_create", "shm_open"},
       {"_ZSt4cout", "_ZSt4cerr", "_ZSt4clog", "_ZSt3cin", "_ZNSo", "_ZNSi", "_ZStlsISt11char_traits",
        "_ZNSt14basic_ofstream", "_ZNSt14basic_ifstream", "_ZNSt13basic_fstream", "_ZNSt13random_device"}},
      {"network",
       {"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "send", "sendto", "sendmsg",
        "recv", "recvfrom", "recvmsg", "getaddrinfo", "gethostbyname", "setsockopt", "shutdown"},
       {"inet_"}},
      {"dynamic loading", {"dlopen", "dlmopen", "dlsym", "dlvsym", "dlclose", "dladdr", "dlerror", "dl_iterate_phdr"}, {}},
      {"time",
       {"time", "clock", "clock_gettime", "gettimeofday", "nanosleep", "usleep", "sleep", "alarm", "timer_create",
        "setitimer", "getitimer", "times", "clock_nanosleep", "sched_yield"},
       {"_ZNSt6chrono", "_ZNSt3_V26chrono"}},
      {"signal",
       {"signal", "sigaction", "raise", "sigprocmask", "sigsetjmp", "siglongjmp", "setjmp", "longjmp", "_setjmp",
        "__sigsetjmp", "__longjmp_chk", "sigaltstack", "pause"},
       {}},
      {"raw system call", {"syscall"}, {}},
      {"library",
       {},
       {"cblas_", "sgemm", "dgemm", "openblas_", "mkl_", "_ZN2at", "_ZN5torch", "_ZN3c10", "_ZNK2at", "_ZNK3c10",
        "cublas", "cudnn", "cufft", "curand", "cusparse", "cusolver", "cutlass", "nccl"}},
      {"cuda stream/event/graph",
       {},
       {"cudaStream", "cudaEvent", "cudaGraph", "cudaDeviceSynchronize", "cudaDeviceReset", "cudaSetDevice",
        "cudaHostAlloc", "cudaMallocHost", "cudaHostRegister", "cudaMallocManaged", "cudaLaunchHostFunc", "cudaIpc"}}};
  return categories;
}

bool allowed_by_default(const std::string& symbol, Backend backend) {
  static const std::set<std::string> plain = [] {
    std::set<std::string> names(kPlainAllowed.begin(), kPlainAllowed.end());
    for (std::string f : kMath) {
      names.insert(f);
      names.insert(f + "f");
      names.insert(f + "l");
    }
    return names;
  }();
  if (plain.count(symbol)) return true;
  if (backend == Backend::cuda && std::find(kCudaAllowed.begin(), kCudaAllowed.end(), symbol) != kCudaAllowed.end())
    return true;
  // operator new / delete (all overloads), type info and vtables (data), std exception throw helpers,
  // the out-of-line parts of std containers, vectorised libm.
  for (std::string_view p : {"_Znw", "_Zna", "_Zdl", "_Zda", "_ZTI", "_ZTS", "_ZTV", "_ZGV", "_ZNSt8__detail",
                             "_ZNKSt8__detail"})
    if (starts_with(symbol, p)) return true;
  if (starts_with(symbol, "_ZSt") && contains(symbol, "__throw_")) return true;
  if (contains(symbol, "_Rb_tree_")) return true;
  // std's exception classes (constructed, thrown, caught, what()), and the out-of-line vector growth helpers.
  for (std::string_view p : {"_ZNSt13runtime_error", "_ZNKSt13runtime_error", "_ZNSt11logic_error",
                             "_ZNKSt11logic_error", "_ZNSt12out_of_range", "_ZNSt16invalid_argument",
                             "_ZNSt12length_error", "_ZNSt9exception", "_ZNKSt9exception", "_ZNSt13bad_alloc",
                             "_ZNKSt13bad_alloc", "_ZNSt12domain_error", "_ZNSt14overflow_error",
                             "_ZNSt15underflow_error", "_ZNSt11range_error", "_ZNSt9bad_alloc"})
    if (starts_with(symbol, p)) return true;
  if (starts_with(symbol, "_ZNSt7__cxx1112basic_string") || starts_with(symbol, "_ZNKSt7__cxx1112basic_string"))
    return true;
  return false;
}

// A C++ name as its author wrote it ("std::vector<float>::push_back(float const&)"), with the linker's name after
// it when they differ; long names are cut (a refusal must stay readable).
std::string readable_symbol(const std::string& symbol) {
  int status = -1;
  char* demangled = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled ? demangled : symbol;
  std::free(demangled);
  constexpr std::size_t kMax = 160;
  if (out.size() > kMax) out = out.substr(0, kMax) + "...";
  return out == symbol ? out : out + " [" + symbol.substr(0, kMax) + "]";
}

// What a Python extension may import although a plain candidate may not: PyTorch's own C++ API (the tensors it is
// handed are PyTorch's) and std::ostream on strings (TORCH_CHECK's messages). Standard streams themselves stay
// refused by name (std::cout...).
bool extension_may_import(std::string_view symbol) {
  for (std::string_view p : {"_ZN2at", "_ZN5torch", "_ZN3c10", "_ZNK2at", "_ZNK3c10", "_ZNK5torch", "_ZNSo", "_ZNSi",
                             "_ZStlsISt11char_traits"})
    if (starts_with(symbol, p)) return true;
  return false;
}

// Writing diagnostics to stderr, which PyTorch's and pybind11's headers compile into every extension (pybind11's GIL
// checks, c10's registries). A worker's standard streams are /dev/null, and nothing here opens a stream: stdout and
// stdin, fopen and fdopen stay refused.
bool extension_diagnostic_output(std::string_view symbol) {
  static const std::set<std::string_view> names{"stderr",  "fflush", "fprintf", "__fprintf_chk", "vfprintf",
                                                "__vfprintf_chk", "fputs", "fputc", "fwrite", "putc"};
  return names.count(symbol) > 0;
}

// PyTorch's own ways to another stream, an event or a graph, refused in an extension as cudaStream* is.
bool torch_stream_symbol(std::string_view symbol) {
  for (std::string_view s : {"getStreamFromPool", "getStreamFromExternal", "setCurrentCUDAStream", "CUDAEvent",
                             "CUDAGraph", "device_synchronize", "stream_synchronize"})
    if (contains(symbol, s)) return true;
  return false;
}

// PyTorch's ways to register or replace an operator's kernel (TORCH_LIBRARY_IMPL and the like): an extension that
// replaced aten::copy_ would run its work inside the evaluator's own copy of its result.
bool torch_registration_symbol(std::string_view symbol) {
  for (std::string_view s : {"_ZN5torch7Library", "TorchLibraryInit", "_ZN3c1017RegisterOperators",
                             "_ZN3c1010Dispatcher12registerImpl", "_ZN3c1010Dispatcher11registerDef",
                             "_ZN3c1010Dispatcher16registerFallback", "_ZN3c1010Dispatcher15registerLibrary"})
    if (contains(symbol, s)) return true;
  return false;
}

}  // namespace

std::string classify_import(const std::string& symbol, const GatePolicy& policy) {
  const auto& extra = policy.extra_allowed_imports;
  if (std::find(extra.begin(), extra.end(), symbol) != extra.end()) return {};
  if (policy.python_extension && torch_stream_symbol(symbol)) return "cuda stream/event/graph";
  if (policy.python_extension && torch_registration_symbol(symbol)) return "operator registration";
  if (policy.python_extension && (extension_may_import(symbol) || extension_diagnostic_output(symbol))) return {};
  for (const auto& category : forbidden_categories()) {
    if (std::find(category.exact.begin(), category.exact.end(), symbol) != category.exact.end())
      return std::string(category.name);
    for (auto p : category.prefixes)
      if (starts_with(symbol, p)) return std::string(category.name);
  }
  if (allowed_by_default(symbol, policy.backend) || policy.python_extension) return {};
  return "not allowlisted";
}

namespace {
// An extension's one entry point is its module's PyInit_<name>.
std::vector<Reason> check_extension_exports(const std::vector<std::string>& exports, std::vector<Reason> reasons) {
  static const std::set<std::string> markers{"_init", "_fini", "__bss_start", "_edata", "_end"};
  bool entry = false;
  for (const auto& s : exports) {
    if (starts_with(s, "PyInit_")) entry = true;
    else if (!markers.count(s))
      reasons.push_back({ReasonCode::forbidden_export,
                         readable_symbol(s) + " is exported, and only the module's PyInit_ may be"});
  }
  if (!entry) reasons.push_back({ReasonCode::missing_entry_point, "the extension exports no PyInit_ function"});
  return reasons;
}
}  // namespace

std::vector<Reason> check_shared_object(const std::filesystem::path& so_path, const GatePolicy& policy) {
  std::vector<Reason> reasons;
  std::error_code ec;
  auto size = std::filesystem::file_size(so_path, ec);
  if (ec) return {{ReasonCode::malformed_binary, "cannot stat " + so_path.string()}};
  if (size > policy.max_binary_bytes)
    return {{ReasonCode::binary_too_large, std::to_string(size) + " bytes; the limit is " +
                                     std::to_string(policy.max_binary_bytes)}};
  DynamicSymbols symbols;
  try {
    symbols = read_dynamic_symbols(so_path);
  } catch (const std::exception& e) {
    return {{ReasonCode::malformed_binary, e.what()}};
  }
  for (const auto& s : symbols.imports) {
    std::string why = classify_import(s, policy);
    if (!why.empty()) reasons.push_back({ReasonCode::forbidden_import, readable_symbol(s) + " (" + why + ")"});
  }
  if (policy.python_extension) return check_extension_exports(symbols.exports, std::move(reasons));
  // Linker-defined section markers are harmless; anything else beyond the entry point could interpose
  // on the harness's own functions.
  static const std::set<std::string> allowed_exports{"crucible_forward", "_init", "_fini", "__bss_start", "_edata",
                                                     "_end"};
  for (const auto& s : symbols.exports)
    if (!allowed_exports.count(s))
      reasons.push_back({ReasonCode::forbidden_export, readable_symbol(s) + " is exported, and only the contract's entry point "
                                             "may be (it could stand in for the harness's own functions)"});
  if (std::find(symbols.exports.begin(), symbols.exports.end(), "crucible_forward") == symbols.exports.end())
    reasons.push_back({ReasonCode::missing_entry_point, "crucible_forward is not exported: is it declared with CRUCIBLE_API "
                                              "and the contract's signature?"});
  return reasons;
}

}  // namespace crucible::eval

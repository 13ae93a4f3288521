#include "cuda_split_build.h"

#include <cctype>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "crucible/eval/cuda_split.h"
#include "elf_symbols.h"

namespace crucible::eval {
namespace fs = std::filesystem;
namespace {

bool write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

// Mangled names go into assembly as they are: only the characters a mangled name is made of.
bool plain_symbol(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.')) return false;
  return true;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Explicit instantiations, for NVRTC, of the template kernels the host half refers to: from g++'s undefined
// references, demangled ("void (anonymous namespace)::k<4>(float const*, float*, long)"). A name it cannot write
// back as C++ is left out; NVRTC then lacks that instance, the link finds it missing, and nvcc's build decides.
std::string template_instances(const std::vector<ElfSymbol>& host, const std::vector<std::string>& templates) {
  std::string out = "\n";
  for (const ElfSymbol& s : host) {
    if (s.defined || !s.global || s.name.rfind("_Z", 0) != 0) continue;
    int status = 0;
    char* raw = abi::__cxa_demangle(s.name.c_str(), nullptr, nullptr, &status);
    if (status != 0 || raw == nullptr) continue;
    std::string name(raw);
    std::free(raw);
    if (name.rfind("void ", 0) != 0) continue;
    name.erase(0, 5);
    const std::string anonymous = "(anonymous namespace)::";
    const bool in_anonymous = name.rfind(anonymous, 0) == 0;
    if (in_anonymous) name.erase(0, anonymous.size());
    if (name.find("(anonymous namespace)") != std::string::npos || name.find('{') != std::string::npos) continue;
    const std::size_t angle = name.find('<');
    if (angle == std::string::npos) continue;
    const std::size_t colon = name.rfind("::", angle);
    const std::string base = name.substr(colon == std::string::npos ? 0 : colon + 2, angle - (colon == std::string::npos ? 0 : colon + 2));
    if (std::find(templates.begin(), templates.end(), base) == templates.end()) continue;
    const std::string line = "template __global__ void " + name + ";";
    out += in_anonymous ? "namespace { " + line + " }\n" : line + "\n";
  }
  return out;
}

// The assembly that embeds the cubin and gives every kernel the host code launches an entry under its host name
// (crucible/fast_launch.h reads the entries). Empty when a kernel the host code names is not in the device code.
std::string blob_assembly(const std::vector<ElfSymbol>& device, const std::vector<ElfSymbol>& host, std::string& error) {
  std::map<std::string, std::string> kernels;  // match key -> the device code's name
  for (const ElfSymbol& s : device)
    if (s.defined && (s.other & kCubinEntryFlag) && plain_symbol(s.name)) kernels.emplace(kernel_match_key(s.name), s.name);
  std::vector<std::pair<std::string, std::string>> entries;  // host name, device name
  for (const ElfSymbol& s : host) {
    if (s.defined || !s.global) continue;
    auto it = kernels.find(kernel_match_key(s.name));
    if (it == kernels.end()) continue;  // a library function: the link resolves it
    if (!plain_symbol(s.name)) return error = "an unusual symbol name", std::string();
    entries.emplace_back(s.name, it->second);
  }
  std::ostringstream a;
  a << "  .section .rodata\n  .balign 64\n  .globl crucible_fast_cubin\n  .hidden crucible_fast_cubin\n"
       "crucible_fast_cubin:\n  .incbin \"device.cubin\"\n  .balign 4\n"
       "  .globl crucible_fast_kernel_count\n  .hidden crucible_fast_kernel_count\n"
       "crucible_fast_kernel_count:\n  .long "
    << entries.size() << "\n";
  for (std::size_t i = 0; i < entries.size(); ++i) a << ".Lcrucible_name" << i << ":\n  .asciz \"" << entries[i].second << "\"\n";
  a << "  .data\n  .balign 8\n  .globl crucible_fast_kernels\n  .hidden crucible_fast_kernels\ncrucible_fast_kernels:\n";
  for (std::size_t i = 0; i < entries.size(); ++i)
    a << "  .globl " << entries[i].first << "\n  .hidden " << entries[i].first << "\n" << entries[i].first
      << ":\n  .quad .Lcrucible_name" << i << "\n  .quad 0\n";
  a << "  .section .note.GNU-stack,\"\",@progbits\n";
  return a.str();
}

}  // namespace

bool is_clang(const std::string& compiler) {
  return fs::path(compiler).filename().string().find("clang") != std::string::npos;
}

std::vector<std::string> split_host_command(const SplitToolchain& tools) {
  std::vector<std::string> argv{tools.cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden",
                                "-fvisibility-inlines-hidden", "-Wno-attributes", "-Iinclude",
                                "-I" + tools.toolkit_include.string()};
  if (!is_clang(tools.cxx)) argv.insert(argv.begin() + 6, "-fno-gnu-unique");  // clang makes no unique symbols
  argv.insert(argv.end(), tools.host_flags.begin(), tools.host_flags.end());
  return argv;
}

SplitBuild build_split(const std::string& source, const SplitToolchain& tools, const fs::path& work,
                       const RunStep& run) {
  SplitBuild b;
  auto not_split = [&](std::string why) {
    b.kind = SplitBuild::Kind::not_split;
    b.path = CompilePath::whole;
    b.why_not = std::move(why);
    return b;
  };
  if (tools.cuda_arch.rfind("sm_", 0) != 0) return not_split("a virtual architecture (" + tools.cuda_arch + ")");
  const CudaSplit split = split_cuda_source(source);
  if (!split.host_ok()) return not_split(split.host_refusal);
  const bool use_nvrtc = split.device_ok() && !tools.nvrtc.empty() && tools.extra_flags.empty();
  // With template kernels NVRTC needs the instances the host half names: its file is written once they are known.
  const bool needs_instances = use_nvrtc && !split.template_kernels.empty();
  if (!write_text(work / "host.cpp", split.host) ||
      (use_nvrtc && !needs_instances && !write_text(work / "device.cu", split.device)))
    return not_split("cannot write the halves");

  // The host half beside the device half: together they take about as long as the device half alone (with template
  // kernels for NVRTC, one after the other).
  ProcessResult host;
  std::thread host_compile([&] {
    std::vector<std::string> argv = split_host_command(tools);
    argv.insert(argv.end(), {"-c", "host.cpp", "-o", "host.o"});
    host = run(argv);
  });
  ProcessResult device;
  b.path = CompilePath::split_nvcc;
  std::vector<ElfSymbol> host_symbols;  // read once, for the instances and for the kernel table
  auto read_host_symbols = [&] {
    try {
      if (host.ok() && host_symbols.empty()) host_symbols = read_symbol_table(work / "host.o");
    } catch (const std::exception&) {  // a malformed object: the kernel table below says so
    }
  };
  bool nvrtc_ready = use_nvrtc && !needs_instances;
  if (needs_instances) {
    host_compile.join();
    read_host_symbols();
    nvrtc_ready = !host_symbols.empty() &&
                  write_text(work / "device.cu", split.device + template_instances(host_symbols, split.template_kernels));
  }
  if (nvrtc_ready) {
    device = run({tools.nvrtc, tools.cuda_arch, "device.cu", "device.cubin", "-I" + tools.toolkit_include.string()});
    if (device.ok()) b.path = CompilePath::split_nvrtc;
  }
  if (nvrtc_ready && device.timed_out) b.path = CompilePath::split_nvrtc;  // the time limit is spent: no second try
  if (b.path != CompilePath::split_nvrtc) {  // nvcc takes the candidate's file as written
    std::vector<std::string> argv = {tools.nvcc, "-std=c++17", "-O3", "-arch=" + tools.cuda_arch, "-cubin", "-Iinclude"};
    argv.insert(argv.end(), tools.extra_flags.begin(), tools.extra_flags.end());
    argv.insert(argv.end(), tools.device_flags.begin(), tools.device_flags.end());
    argv.insert(argv.end(), {"candidate.cu", "-o", "device.cubin"});
    device = run(argv);
  }
  if (host_compile.joinable()) host_compile.join();
  b.log = device.output;
  if (!device.ok()) {
    b.kind = SplitBuild::Kind::device_failed;
    b.failure = device;
    return b;
  }
  if (!host.ok()) return not_split("the host half did not compile: " + first_line(host.output));

  read_host_symbols();
  std::string error, blob;
  try {
    if (host_symbols.empty()) throw std::runtime_error("no symbols in the host half");
    blob = blob_assembly(read_symbol_table(work / "device.cubin"), host_symbols, error);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (blob.empty()) return not_split("cannot bind the kernels: " + error);
  if (!write_text(work / "blob.s", blob)) return not_split("cannot write the kernel table");
  // -z defs: a kernel the host code launches but the device code lacks fails here, not at load. A Python
  // extension leaves Python's symbols undefined; its kernels are checked by name when it loads.
  std::vector<std::string> link_argv{tools.cxx, "-shared", "-o", "candidate.so", "host.o", "blob.s"};
  link_argv.insert(link_argv.end(), tools.link_flags.begin(), tools.link_flags.end());
  link_argv.insert(link_argv.end(), {"-L" + tools.toolkit_lib.string(), "-lcudart", "-Wl,--version-script=exports.map"});
  if (!tools.python_extension) link_argv.push_back("-Wl,-z,defs");
  ProcessResult link = run(link_argv);
  if (!link.ok()) return not_split("the halves did not link: " + first_line(link.output));
  b.kind = SplitBuild::Kind::built;
  return b;
}

}  // namespace crucible::eval

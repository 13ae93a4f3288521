// crucible-nvrtc: compiles the device half of a split CUDA candidate (crucible/eval/cuda_split.h) to a cubin with
// NVRTC. A program of its own, not a library call in the evaluator: it runs under the same sandbox as nvcc (no
// privileges, files confined to the toolchain and its build directory), since it parses untrusted source.
// Usage: crucible-nvrtc ARCH INPUT.cu OUTPUT.cubin [NVRTC OPTION...]   (ARCH as sm_90)
// Exit status 0 with the cubin written; 1 with NVRTC's log on stderr; 2 on a usage or I/O error.
#include <nvrtc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: crucible-nvrtc ARCH INPUT.cu OUTPUT.cubin [OPTION...]\n");
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "crucible-nvrtc: cannot read %s\n", argv[2]);
    return 2;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string source = text.str();

  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), "candidate.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    std::fprintf(stderr, "crucible-nvrtc: cannot create the program\n");
    return 2;
  }
  // -w: the device half lacks the host code that uses some declarations; its warnings would mislead.
  std::vector<std::string> options = {"-arch=" + std::string(argv[1]), "-std=c++17", "-w"};
  for (int i = 4; i < argc; ++i) options.emplace_back(argv[i]);
  std::vector<const char*> pointers;
  for (const auto& o : options) pointers.push_back(o.c_str());
  const nvrtcResult compiled = nvrtcCompileProgram(program, static_cast<int>(pointers.size()), pointers.data());

  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(program, log.data());
  if (!log.empty() && log.back() == '\0') log.pop_back();
  std::fputs(log.c_str(), stderr);
  if (compiled != NVRTC_SUCCESS) return 1;

  std::size_t size = 0;
  if (nvrtcGetCUBINSize(program, &size) != NVRTC_SUCCESS || size == 0) {
    std::fprintf(stderr, "crucible-nvrtc: no cubin (is %s a real architecture?)\n", argv[1]);
    return 2;
  }
  std::string cubin(size, '\0');
  nvrtcGetCUBIN(program, cubin.data());
  nvrtcDestroyProgram(&program);
  std::ofstream out(argv[3], std::ios::binary);
  out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "crucible-nvrtc: cannot write %s: %s\n", argv[3], std::strerror(errno));
    return 2;
  }
  return 0;
}

// Precompiled headers and the lean kit of KernelBench extensions (extension_headers.h). Each is made by a process of
// the compiler's own priority, staged under a temporary name and renamed into place, so that concurrent evaluators
// (and test processes sharing one cache) see it whole or not at all.
#include "extension_headers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "crucible/eval/static_gate.h"
#include "crucible/eval/subprocess.h"
#include "cuda_split_build.h"
#include "file_io.h"

namespace crucible::eval {
namespace fs = std::filesystem;

// Defined beside the compiler (compiler.cpp), which decides by it whether it may run as nobody.
bool reachable_by_others(const fs::path& path);

namespace {

// Where the made-once pieces live. As root the compiler runs as nobody, and a compile cache under /root is out of its
// reach: then a directory of this user's own in the system's temporary directory, which others may read and only
// this user write (one that is not exactly that, made by someone else, is not used: the build is then slower).
fs::path kit_root(const Compiler& compiler) {
  if (geteuid() != 0 || reachable_by_others(compiler.cache_dir())) return compiler.cache_dir();
  const fs::path dir = fs::temp_directory_path() / ("crucible-kits-" + std::to_string(geteuid()));
  mkdir(dir.c_str(), 0755);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0 ||
      (st.st_mode & 005) != 005)
    return compiler.cache_dir();
  return dir;
}

bool write_text(const fs::path& path, const std::string& text) {
  try {
    write_file_atomically(path, text);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The command without what makes a shared object: these steps compile one unit each.
std::vector<std::string> compile_only(std::vector<std::string> argv) {
  for (auto it = argv.begin(); it != argv.end();)
    it = (*it == "-shared" || it->rfind("-Wl,", 0) == 0) ? argv.erase(it) : it + 1;
  return argv;
}

// Runs `argv` writing `output` under a staged name; true once `output` is in place.
bool produce(std::vector<std::string> argv, const fs::path& output, Backend backend) {
  const fs::path staged = output.string() + ".tmp" + std::to_string(getpid());
  argv.insert(argv.end(), {"-o", staged.string()});
  ProcessLimits limits;
  limits.wall_seconds = 600.0;
  set_build_priority(limits, backend);
  limits.environment = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"};
  if (!run_process(argv, limits).ok()) return false;
  std::error_code ec;
  fs::rename(staged, output, ec);
  return !ec;
}

// A precompiled header as each compiler finds it beside the header that -include names: g++'s .gch, clang's .pch.
// clang's is made with the header's template instantiations done once, where g++ redoes them in every unit (most of
// a lean unit's compile: about 1.3 s of 1.9 on the dev VM, against 0.5 s in all with clang).
fs::path precompiled_path(const fs::path& header, const std::vector<std::string>& argv) {
  return header.string() + (is_clang(argv.front()) ? ".pch" : ".gch");
}

// clang records the header's path in its precompiled header and needs it there at every use: the path without links
// (a compile cache may reach the kits through one). It also refuses a header whose time changed since (another
// process that made the same kit wrote it again, a reinstalled PyTorch) unless told to compare contents.
std::vector<std::string> header_command(std::vector<std::string> argv, const fs::path& header) {
  fs::path named = header;
  if (is_clang(argv.front())) {
    argv.insert(argv.end(), {"-fpch-instantiate-templates", kClangValidateContents});
    std::error_code ec;
    if (const fs::path resolved = fs::canonical(header, ec); !ec) named = resolved;
  }
  argv.insert(argv.end(), {"-x", "c++-header", named.string()});
  return argv;
}

std::string material_of(const std::vector<std::string>& argv, const std::string& extra) {
  std::string material = extra;
  for (const auto& a : argv) material += '\n' + a;
  return material;
}

}  // namespace

int clang_rank(const std::string& name) {
  if (name == "clang++") return 1 << 20;  // the one the distribution chose as default
  const std::string prefix = "clang++-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 4) return -1;
  int version = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    version = version * 10 + (name[i] - '0');
  }
  return version;
}

std::string lean_unit_compiler() {
  if (const char* chosen = std::getenv("CRUCIBLE_KERNELBENCH_CXX")) return chosen;
  // Distributions install clang as clang++-NN, often without the plain name (Ubuntu's clang-16 package).
  static const std::string found = [] {
    std::string best;
    int best_rank = -1;
    for (const char* dir : {"/usr/local/bin", "/usr/bin"}) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const int rank = clang_rank(entry.path().filename().string());
        if (rank > best_rank && access(entry.path().c_str(), X_OK) == 0) best = entry.path().string(), best_rank = rank;
      }
    }
    return best;
  }();
  return found;
}

fs::path precompiled_extension_header(Compiler& compiler, std::vector<std::string> argv, Backend backend) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  argv = compile_only(std::move(argv));
  const fs::path dir = kit_root(compiler) / "kernelbench-pch" / sha256_hex(material_of(argv, "")).substr(0, 24);
  const fs::path header = dir / "torch_extension.h";
  std::error_code ec;
  if (fs::exists(precompiled_path(header, argv), ec)) return header;
  fs::create_directories(dir, ec);
  if (!write_text(header, "#include <torch/extension.h>\n")) return {};
  return produce(header_command(argv, header), precompiled_path(header, argv), backend) ? header : fs::path();
}

std::optional<LeanKit> lean_extension_kit(Compiler& compiler, std::vector<std::string> argv, Backend backend,
                                          const std::string& torch_versions) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  argv = compile_only(std::move(argv));
  const fs::path sources = compiler.include_dir() / "crucible" / "kernelbench";
  const std::string stand_in = read_file_or_empty(sources / "extension.h");
  const std::string bindings = read_file_or_empty(sources / "bindings.h");
  const std::string glue = read_file_or_empty(sources / "tensor_glue.cpp");
  if (stand_in.empty() || bindings.empty() || glue.empty()) return std::nullopt;
  const std::string material = material_of(argv, torch_versions + '\0' + stand_in + '\0' + bindings + '\0' + glue);
  LeanKit kit;
  kit.dir = kit_root(compiler) / "kernelbench-lean" / sha256_hex(material).substr(0, 24);
  kit.header = kit.dir / "lean_prelude.h";
  kit.glue_object = kit.dir / "tensor_glue.o";
  std::error_code ec;
  if (fs::exists(kit.glue_object, ec)) return kit;
  fs::create_directories(kit.dir / "torch", ec);
  // Written once: a header written again after another process precompiled it would be newer than its .pch.
  const auto write_once = [&](const fs::path& path, const std::string& text) {
    std::error_code missing;
    return fs::exists(path, missing) || write_text(path, text);
  };
  if (!write_once(kit.dir / "torch" / "extension.h", stand_in) || !write_once(kit.dir / "crucible_bindings.h", bindings) ||
      !write_once(kit.dir / "tensor_glue.cpp", glue) ||
      !write_once(kit.header, "#include <Python.h>\n#include <torch/types.h>\n"))
    return std::nullopt;
  // Python.h first, as Python asks of every unit that includes it. A missing precompiled header only costs time.
  const auto pch = header_command(argv, kit.header);
  std::thread precompile([&] { produce(pch, precompiled_path(kit.header, argv), backend); });
  std::vector<std::string> object = argv;
  object.insert(object.end(), {"-c", (kit.dir / "tensor_glue.cpp").string()});
  const bool glued = produce(object, kit.glue_object, backend);
  precompile.join();
  if (!glued) return std::nullopt;
  return kit;
}

}  // namespace crucible::eval

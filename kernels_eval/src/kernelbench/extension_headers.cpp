// Precompiled headers and the lean kit of KernelBench extensions (extension_headers.h). Each is made by a process of
// the compiler's own priority, staged under a temporary name and renamed into place, so that concurrent evaluators
// (and test processes sharing one cache) see it whole or not at all.
#include "extension_headers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "crucible/eval/static_gate.h"
#include "crucible/eval/subprocess.h"
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

std::string material_of(const std::vector<std::string>& argv, const std::string& extra) {
  std::string material = extra;
  for (const auto& a : argv) material += '\n' + a;
  return material;
}

}  // namespace

fs::path precompiled_extension_header(Compiler& compiler, std::vector<std::string> argv, Backend backend) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  argv = compile_only(std::move(argv));
  const fs::path dir = kit_root(compiler) / "kernelbench-pch" / sha256_hex(material_of(argv, "")).substr(0, 24);
  const fs::path header = dir / "torch_extension.h";
  std::error_code ec;
  if (fs::exists(dir / "torch_extension.h.gch", ec)) return header;
  fs::create_directories(dir, ec);
  if (!write_text(header, "#include <torch/extension.h>\n")) return {};
  argv.insert(argv.end(), {"-x", "c++-header", header.string()});
  return produce(argv, dir / "torch_extension.h.gch", backend) ? header : fs::path();
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
  if (!write_text(kit.dir / "torch" / "extension.h", stand_in) || !write_text(kit.dir / "crucible_bindings.h", bindings) ||
      !write_text(kit.dir / "tensor_glue.cpp", glue) ||
      !write_text(kit.header, "#include <Python.h>\n#include <torch/types.h>\n"))
    return std::nullopt;
  // Python.h first, as Python asks of every unit that includes it. A missing precompiled header only costs time.
  std::vector<std::string> pch = argv;
  pch.insert(pch.end(), {"-x", "c++-header", kit.header.string()});
  std::thread precompile([&] { produce(pch, kit.header.string() + ".gch", backend); });
  std::vector<std::string> object = argv;
  object.insert(object.end(), {"-c", (kit.dir / "tensor_glue.cpp").string()});
  const bool glued = produce(object, kit.glue_object, backend);
  precompile.join();
  if (!glued) return std::nullopt;
  return kit;
}

}  // namespace crucible::eval

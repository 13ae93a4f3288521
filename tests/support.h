#pragma once
// Shared helpers for the test suites: paths into the source tree and a scratch directory.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace crucible::test {

inline std::filesystem::path source_dir() { return CRUCIBLE_SOURCE_DIR; }
inline std::filesystem::path tasks_dir() { return source_dir() / "configs" / "tasks"; }
inline std::filesystem::path cpu_fixture(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "cpu" / (name + ".cpp");
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A fresh directory under /tmp, removed when the object goes away.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("crucible-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

}  // namespace crucible::test

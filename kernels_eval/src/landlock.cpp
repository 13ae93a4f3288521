#include "crucible/eval/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

// Rights newer than the build machine's kernel headers (Debian 12 ships ABI 3's).
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

namespace crucible::eval {
namespace {

constexpr uint64_t kReadFile = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE;
constexpr uint64_t kWriteFile = LANDLOCK_ACCESS_FS_WRITE_FILE;
constexpr uint64_t kReadDir = LANDLOCK_ACCESS_FS_READ_DIR;
constexpr uint64_t kChangeDir = LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                                LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                                LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                                LANDLOCK_ACCESS_FS_MAKE_SOCK;

// Every filesystem right this kernel knows: a right left unhandled would stay allowed everywhere.
uint64_t handled_rights(int abi) {
  uint64_t rights = kReadFile | kWriteFile | kReadDir | kChangeDir | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                    LANDLOCK_ACCESS_FS_MAKE_BLOCK;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return rights;
}

bool add_path(int ruleset, const std::string& path, uint64_t wanted, uint64_t handled, std::string& error) {
  const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return true;  // nothing there to allow
  struct stat st {};
  fstat(fd, &st);
  // Rules on a file may carry only the rights that act on files.
  const uint64_t file_rights = kReadFile | kWriteFile | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = wanted & handled & (S_ISDIR(st.st_mode) ? ~uint64_t{0} : file_rights);
  rule.parent_fd = fd;
  const long added = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int saved = errno;
  close(fd);
  if (added != 0) error = "landlock rule for " + path + ": " + std::strerror(saved);
  return added == 0;
}

}  // namespace

std::vector<std::string> system_files() {
  return {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache", "/etc/alternatives",
          "/dev/urandom"};
}

void allow_gpu_driver(FileRules& rules) {
  for (const char* info : {"/sys", "/proc/driver/nvidia", "/proc/devices", "/proc/cpuinfo", "/proc/meminfo",
                           "/proc/stat", "/proc/sys/vm", "/proc/modules"})
    rules.read_only.push_back(info);
  rules.read_write.push_back("/dev/null");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec))
    if (entry.path().filename().string().rfind("nvidia", 0) == 0) rules.read_write.push_back(entry.path().string());
}

int landlock_abi() {
  static const int abi = [] {
    const long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return v > 0 ? static_cast<int>(v) : 0;
  }();
  return abi;
}

int build_file_rules(const FileRules& rules, std::string& error) {
  const int abi = landlock_abi();
  if (abi == 0) {
    error = "Landlock is not available in this kernel";
    return -1;
  }
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = handled_rights(abi);
  const int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (ruleset < 0) {
    error = std::string("landlock_create_ruleset: ") + std::strerror(errno);
    return -1;
  }
  const uint64_t handled = attr.handled_access_fs;
  const uint64_t everything = handled & ~(LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK);
  bool ok = true;
  for (const auto& p : rules.read_only) ok = ok && add_path(ruleset, p, kReadFile | kReadDir, handled, error);
  for (const auto& p : rules.read_write) ok = ok && add_path(ruleset, p, everything, handled, error);
  if (!ok) {
    close(ruleset);
    return -1;
  }
  return ruleset;
}

bool allow_own_proc(int ruleset_fd) {
  const uint64_t handled = handled_rights(landlock_abi());
  auto allow = [&](const char* path, uint64_t rights) {
    const int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return false;
    landlock_path_beneath_attr rule{};
    rule.allowed_access = rights & handled;
    rule.parent_fd = fd;
    const long added = syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    close(fd);
    return added == 0;
  };
  return allow("/proc/self", kReadFile | kReadDir) &&
         allow("/proc/self/task", kReadFile | kWriteFile | kReadDir | LANDLOCK_ACCESS_FS_TRUNCATE);
}

bool enter_file_rules(int ruleset_fd) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return syscall(SYS_landlock_restrict_self, ruleset_fd, 0) == 0;
}

}  // namespace crucible::eval

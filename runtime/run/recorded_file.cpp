#include "run/recorded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "run/run_directory.h"

namespace crucible::run {
namespace {
namespace fs = std::filesystem;

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(Descriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void refuse(const fs::path& path, const std::string& why) {
  throw RecordedFileError(path.string() + ": " + why);
}

// O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever.
int open_without_blocking(const fs::path& path, bool follow_link) {
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (follow_link ? 0 : O_NOFOLLOW);
  const int fd = ::open(path.c_str(), flags);
  if (fd >= 0) return fd;
  if (errno == ELOOP) refuse(path, "is a symbolic link; only regular files are read");
  refuse(path, std::string("cannot open: ") + std::strerror(errno));
}

std::string read_up_to(int fd, const fs::path& path, std::size_t max_bytes) {
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(path, std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes)
      refuse(path, "is larger than " + std::to_string(max_bytes) + " bytes");
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

// Where the open descriptor really points, after every directory link on the way was followed.
fs::path resolved_path(int fd, const fs::path& path) {
  std::error_code ec;
  auto real = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec) real = fs::canonical(path, ec);
  if (ec) refuse(path, "cannot resolve: " + ec.message());
  return real;
}

// A regular file of at most max_bytes, open; refused before anything is read.
Descriptor open_regular(const fs::path& path, std::size_t max_bytes, bool follow_link) {
  Descriptor fd(open_without_blocking(path, follow_link));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(path, "is not a regular file");
  if (static_cast<std::size_t>(st.st_size) > max_bytes)
    refuse(path, "is larger than " + std::to_string(max_bytes) + " bytes");
  return fd;
}

bool is_inside(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

}  // namespace

std::string read_regular_file(const fs::path& path, std::size_t max_bytes, bool follow_link) {
  const Descriptor fd = open_regular(path, max_bytes, follow_link);
  return read_up_to(fd.get(), path, max_bytes);
}

std::string read_recorded_source(const fs::path& run_dir, const std::string& source_file, std::size_t max_bytes) {
  if (!is_recorded_source_path(source_file))
    throw RecordedFileError("'" + source_file + "' is not a relative path under sources/ without '..'");
  const fs::path path = run_dir / source_file;
  const Descriptor fd = open_regular(path, max_bytes, /*follow_link=*/false);
  std::error_code ec;
  const fs::path root = fs::canonical(run_dir, ec);
  if (ec || !is_inside(resolved_path(fd.get(), path), root)) refuse(path, "resolves to a file outside " + run_dir.string());
  return read_up_to(fd.get(), path, max_bytes);
}

}  // namespace crucible::run

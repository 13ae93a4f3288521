#include "fd_passing.h"

#include <sys/socket.h>

#include <cstring>

namespace crucible::eval {
namespace {
struct FdMessage {
  iovec io;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr header{};
  FdMessage(const void* data, std::size_t size) : io{const_cast<void*>(data), size} {
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
};
}  // namespace

bool send_with_fds(int socket, const void* data, std::size_t size, const int* fds, int count) {
  if (count < 1 || count > kMaxPassedFds) return false;
  FdMessage m(data, size);
  m.header.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* cm = CMSG_FIRSTHDR(&m.header);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * count);
  return sendmsg(socket, &m.header, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

int receive_with_fds(int socket, void* data, std::size_t size, int* fds) {
  FdMessage m(data, size);
  if (recvmsg(socket, &m.header, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(size)) return -1;
  cmsghdr* cm = CMSG_FIRSTHDR(&m.header);
  if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) return -1;
  const auto count = static_cast<int>((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  if (count < 1 || count > kMaxPassedFds) return -1;
  std::memcpy(fds, CMSG_DATA(cm), sizeof(int) * count);
  return count;
}

}  // namespace crucible::eval

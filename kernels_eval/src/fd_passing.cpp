#include "fd_passing.h"

#include <sys/socket.h>

#include <cstring>

namespace crucible::eval {
namespace {
struct FdMessage {
  iovec io;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  FdMessage(const void* data, std::size_t size) : io{const_cast<void*>(data), size} {
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
};
}  // namespace

bool send_with_fd(int socket, const void* data, std::size_t size, int fd) {
  FdMessage m(data, size);
  cmsghdr* cm = CMSG_FIRSTHDR(&m.header);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  return sendmsg(socket, &m.header, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

int receive_with_fd(int socket, void* data, std::size_t size) {
  FdMessage m(data, size);
  if (recvmsg(socket, &m.header, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(size)) return -1;
  cmsghdr* cm = CMSG_FIRSTHDR(&m.header);
  if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
  return fd;
}

}  // namespace crucible::eval

#pragma once
// One message plus one file descriptor over a Unix socket (SCM_RIGHTS): how the evaluator lends its
// shared arena to a worker.
#include <cstddef>

namespace crucible::eval {

bool send_with_fd(int socket, const void* data, std::size_t size, int fd);
// Returns the received descriptor, or -1 unless exactly `size` bytes and one descriptor arrived.
int receive_with_fd(int socket, void* data, std::size_t size);

}  // namespace crucible::eval

#pragma once
// One message plus file descriptors over a Unix socket (SCM_RIGHTS): how the evaluator lends its shared arena (and
// a GPU worker's release page) to a worker.
#include <cstddef>

namespace crucible::eval {

constexpr int kMaxPassedFds = 2;

bool send_with_fds(int socket, const void* data, std::size_t size, const int* fds, int count);
// Fills `fds` (kMaxPassedFds of room) and returns how many descriptors came, or -1 unless exactly `size` bytes and
// at least one descriptor arrived.
int receive_with_fds(int socket, void* data, std::size_t size, int* fds);

}  // namespace crucible::eval

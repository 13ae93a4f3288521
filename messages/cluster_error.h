#pragma once
// Errors that cross between a coordinator node and its evaluator nodes: codes, never prose, so a node decides what
// to do (leave for good, wait for the next seed's run, join again) without reading text.
#include <cstdint>  // before CAF: its atom_val.hpp uses uint64_t without including it (g++ 13 needs it)

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include <cstdint>
#include <string>

namespace crucible::messages {

enum class cluster_error : uint8_t {
  run_over = 1,     // the run this session belonged to has ended; the coordinator node may start the next seed's
  join_refused,     // the node may not join (protocol, name, devices, or it did not prove the secret): do not retry
  session_unknown,  // no such session here (it ended, or it belongs to another run of this coordinator node)
  session_lost,     // the session was ended while the node still used it (a heartbeat missed, the node replaced)
};

std::string to_string(cluster_error x);

// The error's code when it is one of these, else none (0).
inline cluster_error cluster_code(const caf::error& e) {
  return e.category() == caf::atom("cluster") ? static_cast<cluster_error>(e.code()) : cluster_error{};
}

}  // namespace crucible::messages

CAF_ERROR_CODE_ENUM(crucible::messages::cluster_error, "cluster")

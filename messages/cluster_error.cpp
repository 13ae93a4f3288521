#include "messages/cluster_error.h"

namespace crucible::messages {

std::string to_string(cluster_error x) {
  switch (x) {
    case cluster_error::run_over: return "run_over";
    case cluster_error::join_refused: return "join_refused";
    case cluster_error::session_unknown: return "session_unknown";
    case cluster_error::session_lost: return "session_lost";
  }
  return "cluster_error(" + std::to_string(static_cast<int>(x)) + ")";
}

}  // namespace crucible::messages

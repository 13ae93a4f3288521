#pragma once
// A worker's fatal signals leave a note in the control block (signal, code, address, and who raised it) before the
// process dies of them, so the evaluator can tell the sandbox's refusal from a crash and from a signal the candidate
// sent itself.
#include "crucible/eval/worker_protocol.h"

namespace crucible::eval::worker {

void install_crash_notes(protocol::Control* control);

}  // namespace crucible::eval::worker

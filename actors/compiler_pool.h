#pragma once
// Compiler pool: N workers, each pulling the next candidate from the coordinator and building it into the content-
// addressed cache that the evaluators read, with exactly the options their evaluation will use.
#include <memory>

#include "actors/interfaces.h"
#include "crucible/eval/evaluator.h"

namespace crucible::actors {

// One worker; spawn it detached (a compile blocks its thread). `front` is shared by all workers (thread-safe, no
// sandbox workers of its own). Returns when the coordinator refuses a pull (the run is over).
void compile_worker(caf::blocking_actor* self, coordinator_actor coordinator, std::shared_ptr<eval::Evaluator> front,
                    eval::EvalOptions options, int index);

}  // namespace crucible::actors

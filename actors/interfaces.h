#pragma once
// The typed interfaces of Crucible's actors, declared once. Compile workers and evaluators need no interface of
// their own: they only pull work from the coordinator and answer with results.
#include <caf/typed_actor.hpp>

#include <string>

#include "messages/type_ids.h"

namespace crucible::actors {

using namespace crucible::atoms;
namespace msg = crucible::messages;

// An evaluator pulls with its device and its node's session (0: an evaluator of the coordinator's own node).
using coordinator_actor =
    caf::typed_actor<caf::replies_to<run_atom>::with<msg::RunOutcome>,
                     caf::replies_to<pull_compile_atom>::with<msg::CompileRequest>,
                     caf::replies_to<pull_eval_atom, std::string, uint64_t>::with<msg::EvalRequest>,
                     caf::reacts_to<msg::CompileDone>, caf::reacts_to<msg::VerdictReport>,
                     caf::reacts_to<msg::NodeJoined>, caf::reacts_to<msg::NodeLost>>;

// The coordinator node's door for evaluator nodes: the mutual proof of the secret, then heartbeats (with the node's
// log lines) until the node leaves or is lost. check_atom is its own liveness timer; over_atom (from the node that
// runs it) tells every node the run is over: each node hears (over_atom, its session) then.
using gateway_actor = caf::typed_actor<caf::replies_to<msg::NodeHello>::with<msg::JoinChallenge>,
                                       caf::replies_to<msg::NodeProof>::with<msg::JoinAccepted>,
                                       caf::replies_to<msg::NodeHeartbeat>::with<caf::ok_atom>,
                                       caf::reacts_to<leave_atom, uint64_t>, caf::reacts_to<check_atom>,
                                       caf::replies_to<over_atom>::with<caf::ok_atom>>;

// flush_atom is the generator's own: requests that arrive together are sampled as one batch.
using generator_actor = caf::typed_actor<caf::replies_to<msg::GenerateRequest>::with<msg::Generated>,
                                         caf::reacts_to<msg::PolicyPublished>, caf::reacts_to<flush_atom>>;

using normalizer_actor = caf::typed_actor<caf::replies_to<msg::ScoreRequest>::with<msg::ScoredGroup>>;

using optimizer_actor = caf::typed_actor<caf::replies_to<msg::TrainBatch>::with<msg::PolicyPublished>>;

using telemetry_actor = caf::typed_actor<caf::reacts_to<msg::CandidateRecord>, caf::reacts_to<msg::ClusterEvent>,
                                         caf::replies_to<msg::CommitUnit>::with<committed_atom>>;

// Seconds since the epoch: stage timestamps in records compare across actors (and, roughly, across nodes).
double wall_now();

}  // namespace crucible::actors

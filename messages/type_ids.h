#pragma once
// Every message type with a CAF type id, and the atoms of the actors' interfaces. A node registers them all with
// `config.add_message_types<caf::id_block::crucible>()`, which is what lets them cross the network.
#include <caf/type_id.hpp>

#include "messages/candidate.h"
#include "messages/cluster.h"
#include "messages/coordination.h"
#include "messages/evaluation.h"
#include "messages/records.h"
#include "messages/training.h"

CAF_BEGIN_TYPE_ID_BLOCK(crucible, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::Candidate))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::CompileRequest))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::CompileDone))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::EvalRequest))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::VerdictReport))
  CAF_ADD_TYPE_ID(crucible, (crucible::policy::Sample))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::TrainBatch))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::PolicyPublished))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::GenerateRequest))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::Generated))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::ScoreRequest))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::ScoredGroup))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::CandidateRecord))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::CommitUnit))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::RunOutcome))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::ClusterEvent))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::NodeHello))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::JoinChallenge))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::NodeProof))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::JoinAccepted))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::NodeHeartbeat))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::NodeJoined))
  CAF_ADD_TYPE_ID(crucible, (crucible::messages::NodeLost))
CAF_END_TYPE_ID_BLOCK(crucible)

CAF_ADD_ATOM(crucible, crucible::atoms, pull_compile_atom, "pullcomp")
CAF_ADD_ATOM(crucible, crucible::atoms, pull_eval_atom, "pulleval")
CAF_ADD_ATOM(crucible, crucible::atoms, run_atom, "run")
CAF_ADD_ATOM(crucible, crucible::atoms, committed_atom, "committed")
CAF_ADD_ATOM(crucible, crucible::atoms, flush_atom, "flush")
CAF_ADD_ATOM(crucible, crucible::atoms, check_atom, "check")
CAF_ADD_ATOM(crucible, crucible::atoms, leave_atom, "leave")
CAF_ADD_ATOM(crucible, crucible::atoms, over_atom, "over")

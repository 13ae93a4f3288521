#pragma once
// What evaluators of one GPU model may hand each other about a task, so that each need not measure it again: how
// long the trusted reference takes, and how timed calls are checked. Never an input or an output. The key names
// everything such a measurement depends on (the task's content, the GPU model, driver and LibTorch, the timing
// settings), so an evaluator only ever uses an entry it would have measured itself.
#include <cstddef>
#include <cstdint>
#include <string>

#include "crucible/eval/task_spec.h"
#include "crucible/eval/verdict.h"

namespace crucible::eval {

// Whether a GPU's timed calls give each call a whole new input, or change inputs at sampled elements (tasks whose
// whole refresh costs more than a share of a reference call; see timing_stage.cpp). Unknown until decided.
enum class RefreshChoice : uint8_t { unknown, whole, sampled };

struct SharedTiming {
  std::string task;  // the candidate's task (a multi-shape task's own name, for each of its shapes)
  std::string key;
  TimingStats reference;
  RefreshChoice refresh = RefreshChoice::unknown;
};

// SHA-256 over what the task is: its references (TorchScript files by their bytes), tensors, sizes, shapes and
// settings; not where its file lies, nor its prompt text. Equal on every node that parsed the same task.
std::string task_fingerprint(const TaskSpec& task);

// The task a shape of a multi-shape task belongs to ("trimul@s1" -> "trimul").
std::string shared_task_name(const std::string& task);

// Keys are a few hundred bytes; a longer one did not come from an evaluator's own key.
constexpr std::size_t kMaxSharedKeyBytes = 1024;

// An entry another evaluator sent is used only if it could be a measurement: a key of at most kMaxSharedKeyBytes, at
// least one trial, and finite positive times with min <= median <= max.
bool plausible(const SharedTiming& t);

}  // namespace crucible::eval

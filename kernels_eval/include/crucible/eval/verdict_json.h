#pragma once
#include <string>

#include "crucible/eval/verdict.h"

namespace crucible::eval {

// One JSON object; indent < 0 gives a single line (JSONL).
std::string to_json(const Verdict& verdict, int indent = 2);

}  // namespace crucible::eval

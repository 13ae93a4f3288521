#pragma once
// Where a GPU worker runs while its calls are timed. The evaluator's thread spins on the doorbell; a worker that
// shares that thread's physical core (its SMT sibling) runs its launches slower for as long as it lives, so each
// worker would time at its own level.
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace crucible::eval {

// The CPU numbers in a sysfs list such as "0-3,8,10-11"; empty when the text is not one.
std::set<int> parse_cpu_list(const std::string& text);

// The first of `allowed` after `caller` (wrapping round) that is neither `caller` nor one of its SMT siblings.
std::optional<int> cpu_apart_from(int caller, const std::vector<int>& allowed,
                                  const std::function<std::set<int>(int)>& siblings);

// The SMT siblings of `cpu` (itself included) as this machine's sysfs lists them; {cpu} when unknown.
std::set<int> machine_siblings(int cpu);

}  // namespace crucible::eval

#pragma once
#include <stdexcept>

namespace crucible::run {

// Anything wrong with a run directory: not one, already used, a repeated commit, a file that cannot be written.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace crucible::run

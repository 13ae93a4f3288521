#include <chrono>

#include "actors/interfaces.h"

namespace crucible::actors {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace crucible::actors

#pragma once
// A tool's main around its body: an exception (a model directory that does not load, a device that is not there,
// a shape the kernels refuse) ends it with the tool's name, the message and exit status 1, where it would otherwise
// reach std::terminate and abort with a core.
#include <cstdio>
#include <exception>

namespace crucible::tools {

template <typename Body>
int guarded_main(const char* tool, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace crucible::tools

// The error convention of core's C++ shims (cuda_graph.cpp, trace.cpp): a C++ exception
// becomes a malloc'd message in `*err` (the caller frees it) and a nonzero return.

#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>

namespace fleetrl {

// Runs `f`, turning a C++ exception into a malloc'd message in `*err` and 1 (else 0).
template <class F>
int guarded(char** err, F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    *err = strdup(e.what());
    return 1;
  }
}

}  // namespace fleetrl

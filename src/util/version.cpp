#include "dpinfer/util/version.h"

// Written on each build by cmake/Version.cmake, and included by this file only, so that a
// new commit recompiles one file. A build of its own (tests/fuzz) defines DPINFER_VERSION instead.
#ifndef DPINFER_VERSION
#include "dpinfer/util/version_string.h"
#endif

namespace dpinfer {

const char* version() { return DPINFER_VERSION; }

}  // namespace dpinfer

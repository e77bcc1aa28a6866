#include "dpinfer/util/version.h"

// Written on each build by cmake/Version.cmake, and included by this file only, so that a
// new commit recompiles one file.
#include "dpinfer/version_string.h"

namespace dpinfer {

const char* version() { return DPINFER_VERSION; }

}  // namespace dpinfer

#include "dpinfer/util/version.h"

// DPINFER_VERSION is defined on this file only (cmake/Version.cmake), so a new
// commit recompiles one file.
#ifndef DPINFER_VERSION
#define DPINFER_VERSION "unknown"
#endif

namespace dpinfer {

const char* version() { return DPINFER_VERSION; }

}  // namespace dpinfer

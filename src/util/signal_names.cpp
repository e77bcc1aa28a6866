#include "dpinfer/util/signal_names.h"

#include <cstring>

namespace dpinfer {

std::string signal_name(int signal) {
  // sigabbrev_np needs glibc 2.32; Debian 12 has 2.36.
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

}  // namespace dpinfer

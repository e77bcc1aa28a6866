#pragma once
// Names of signals, for messages.

#include <string>

namespace dpinfer {

/// "SIGKILL" for 9; "signal 77" for a number the C library has no name for.
std::string signal_name(int signal);

}  // namespace dpinfer

#include "dpinfer/util/error.h"

#include <cstring>

namespace dpinfer {

SystemError::SystemError(const std::string& what_call, int err)
    : Error(what_call + ": " + std::strerror(err)), code_(err) {}

}  // namespace dpinfer

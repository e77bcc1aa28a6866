#pragma once

#include "dpinfer/util/error.h"

namespace dpinfer::launcher {

/// The worker command cannot be started; `status` is 126 or 127, as a shell would exit.
class CommandError : public Error {
 public:
  CommandError(const std::string& message, int status) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace dpinfer::launcher

#include "dpinfer/util/error.h"

#include <cstring>

namespace dpinfer {

SystemError::SystemError(const std::string& what_call, int err)
    : Error(what_call + ": " + std::strerror(err)), code_(err) {}

std::string one_line(std::string message) {
  for (char& c : message)
    if (c == '\n') c = ' ';
  while (!message.empty() && message.back() == ' ') message.pop_back();
  return message;
}

std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

}  // namespace dpinfer

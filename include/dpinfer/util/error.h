#pragma once
// Errors are exceptions inside dpinfer and exit statuses at the edge (cli/).

#include <stdexcept>
#include <string>

namespace dpinfer {

/// A failure with a message meant for the user: one line, lowercase, naming the
/// file, field or value at fault and what to do about it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Bad input the user can fix: a prompts file, a config, a model directory. The
/// edge maps it to exit status 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message) {}
};

/// Bad command-line input (exit status 2).
class UsageError : public InputError {
 public:
  explicit UsageError(const std::string& message) : InputError(message) {}
};

/// The run does not fit the device memory (--max-device-memory, issue 26): refused at the start by the
/// memory plan, or an allocation failed during the run. The message names the budget, what needed more
/// and the next option to try. The edge maps it to exit status 4.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& message) : Error(message) {}
};

/// A system call that failed: the message carries the call's name and strerror(errno).
class SystemError : public Error {
 public:
  SystemError(const std::string& what_call, int err);
  int code() const { return code_; }

 private:
  int code_;
};

/// `message` on one line: newlines become spaces, trailing spaces go (CLI11 and
/// LibTorch messages span lines; dpinfer prints one).
std::string one_line(std::string message);

/// The first line of `message`: c10::Error appends its C++ context and backtrace on
/// the lines after, which a user should never see.
std::string first_line(const std::string& message);

}  // namespace dpinfer

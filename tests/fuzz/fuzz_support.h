#pragma once
// What every harness checks besides "no crash, no sanitizer report": a message dpinfer
// prints for bad input is one line, holds no control character, and is bounded.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dpinfer/util/strings.h"

namespace dpinfer::fuzz {

constexpr size_t kMaxMessageBytes = 2048;

inline void check_message(std::string_view message) {
  bool ok = message.size() <= kMaxMessageBytes;
  for (char c : message) ok = ok && static_cast<unsigned char>(c) >= 0x20 && c != 0x7F;
  if (!ok) {
    std::fprintf(stderr, "message not one bounded printable line (%zu bytes): %s\n", message.size(),
                 printable(message, 600).c_str());
    std::abort();
  }
}

/// A file in memory (memfd), rewritten for each input and opened by its /proc path, so
/// that the code under test reads a real file without touching the disk.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& write(const void* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) std::abort();
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace dpinfer::fuzz

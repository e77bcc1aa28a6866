#include "dpinfer/util/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer {

bool file_exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return S_ISREG(st.st_mode);
  const int err = errno;
  if (err == ELOOP)
    throw Error(quote(path) + " is a loop of symbolic links; fix the link, or download the model again");
  struct stat link {};
  if (err == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    throw Error(quote(path) +
                " is a broken link (its blob is missing, perhaps from an interrupted download); "
                "download the model again");
  if (err != ENOENT && err != ENOTDIR) throw Error(quote(path) + ": cannot read: " + std::strerror(err));
  return false;
}

std::string open_error_text(const std::string& path, int err) {
  struct stat link {};
  if (err == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    return "a broken symbolic link (its target is missing)";
  if (err == ELOOP) return "a loop of symbolic links";
  return std::strerror(err);
}

ReadStatus read_whole_file(const std::string& path, uintmax_t max_bytes, std::string* content, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = open_error_text(path, errno);
    return ReadStatus::kCannotOpen;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *why = std::strerror(errno);
    return ReadStatus::kReadError;
  }
  if (S_ISDIR(st.st_mode)) {
    *why = "a directory, not a file";
    return ReadStatus::kIsDirectory;
  }
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<uintmax_t>(st.st_size) > max_bytes) {
    *why = std::to_string(st.st_size) + " bytes, more than the limit of " + std::to_string(max_bytes);
    return ReadStatus::kTooLarge;
  }
  content->clear();
  if (regular) content->reserve(static_cast<size_t>(st.st_size));
  // Until the end, which for a pipe may come late: never more than one chunk past the limit.
  const size_t chunk_size = regular ? static_cast<size_t>(std::min<uintmax_t>(st.st_size + 4096, 1 << 20)) : 65536;
  std::string chunk(chunk_size, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::strerror(errno);
      return ReadStatus::kReadError;
    }
    if (n == 0) break;
    content->append(chunk.data(), static_cast<size_t>(n));
    if (content->size() > max_bytes) {
      *why = "more than " + std::to_string(max_bytes) + " bytes, the limit";
      content->clear();
      return ReadStatus::kTooLarge;
    }
  }
  return ReadStatus::kOk;
}

}  // namespace dpinfer

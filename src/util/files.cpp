#include "dpinfer/util/files.h"

#include <sys/stat.h>

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

}  // namespace dpinfer

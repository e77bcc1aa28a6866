#include "dpinfer/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

// ".<name>.<host>.<pid>.dpinfer-tmp": hidden, never mistaken for an output, and
// traceable to its writer, so that cleanup spares temporaries of live writers
// (other ranks, other array tasks sharing the directory).
constexpr const char* kTempSuffix = ".dpinfer-tmp";
/// A temporary this old is stale whoever wrote it (its writer would have renamed it).
constexpr auto kStaleAge = std::chrono::hours(1);

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  std::string h(buf);
  for (char& c : h)
    if (c == '.' || c == '/') c = '_';
  return h;
}

/// True when the temporary was written by a process that no longer exists on this
/// host, or is older than kStaleAge.
bool is_stale(const std::filesystem::path& p) {
  std::string name = p.filename().string();
  std::string body = name.substr(0, name.size() - std::string(kTempSuffix).size());
  size_t pid_dot = body.rfind('.');
  size_t host_dot = pid_dot == std::string::npos || pid_dot == 0 ? std::string::npos : body.rfind('.', pid_dot - 1);
  if (host_dot != std::string::npos) {
    std::string host = body.substr(host_dot + 1, pid_dot - host_dot - 1);
    int pid = std::atoi(body.c_str() + pid_dot + 1);
    if (host == host_name() && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) return true;
  }
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(p, ec);
  return !ec && std::filesystem::file_time_type::clock::now() - mtime > kStaleAge;
}

/// The temporary beside `path` that stands for it until the rename: hidden, and naming this
/// host and process, so that remove_stale_temporaries() can tell a dead writer's.
std::string temporary_path(const std::string& path) {
  const std::filesystem::path target(path);
  return (target.parent_path() /
          ("." + target.filename().string() + "." + host_name() + "." + std::to_string(::getpid()) + kTempSuffix))
      .string();
}

/// Writes all of `bytes` to `fd`; 0, or the errno of the write that failed.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), tmp_(temporary_path(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SystemError("cannot write " + quote(tmp_), errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFileWriter::write(std::string_view bytes) {
  if (const int err = write_all(fd_, bytes)) throw SystemError("cannot write " + quote(tmp_), err);
}

void AtomicFileWriter::sync() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw SystemError("cannot sync " + quote(tmp_), err);
  }
  if (::close(fd) != 0) throw SystemError("cannot close " + quote(tmp_), errno);
}

void AtomicFileWriter::publish() {
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw SystemError("cannot rename " + quote(tmp_) + " to " + quote(path_), errno);
  // The new name on disk too: a published file must survive a crash.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void remove_file_durably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return;
    throw SystemError("cannot remove " + quote(path), errno);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

bool is_temporary_name(const std::string& file_name) {
  const std::string suffix = kTempSuffix;
  return file_name.size() > suffix.size() + 1 && file_name[0] == '.' &&
         file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = temporary_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError("cannot write " + quote(tmp), errno);
  if (const int err = write_all(fd, bytes)) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw SystemError("cannot write " + quote(tmp), err);
  }
  // fsync before rename: after a crash the name must never point at missing data.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw SystemError("cannot write " + quote(tmp), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw SystemError("cannot rename " + quote(tmp) + " to " + quote(path), err);
  }
}

size_t remove_stale_temporaries(const std::string& dir, const std::function<bool(const std::string& name)>& descend) {
  namespace fs = std::filesystem;
  size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && is_temporary_name(name) && is_stale(entry.path())) {
      if (fs::remove(entry.path(), ec)) ++removed;
    } else if (descend && entry.symlink_status(ec).type() == fs::file_type::directory && descend(name)) {
      removed += remove_stale_temporaries(entry.path().string(), descend);
    }
  }
  return removed;
}

void SubdirectoryMaker::ensure(const std::string& name) {
  if (made_.count(name)) return;
  const std::string path = root_ + "/" + name;
  if (::mkdir(path.c_str(), 0755) != 0) {
    const int err = errno;
    struct stat st;
    if (err != EEXIST) throw SystemError("cannot make directory " + quote(path), err);
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Error("cannot make directory " + quote(path) + ": a file of that name is in the way; move it");
  }
  // The new entry of its parent on disk before any file in it (rename() does not order them).
  const size_t slash = name.rfind('/');
  const std::string parent = slash == std::string::npos ? root_ : root_ + "/" + name.substr(0, slash);
  const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw SystemError("cannot open " + quote(parent) + " to sync it", errno);
  // Some filesystems cannot sync a directory (EINVAL, as FUSE ones may say): nothing to order there.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    const int err = errno;
    ::close(fd);
    throw SystemError("cannot sync " + quote(parent), err);
  }
  ::close(fd);
  made_.insert(name);
}

}  // namespace dpinfer::io

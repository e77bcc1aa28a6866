#include "dpinfer/plan/run_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

constexpr size_t kMinDigits = 32, kMaxDigits = 128;

/// `s` lowercased when it is kMinDigits..kMaxDigits hex digits, else "".
std::string as_token(const std::string& s) {
  if (s.size() < kMinDigits || s.size() > kMaxDigits) return "";
  std::string out;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

/// The owner that a file this process makes beside `path` gets: its own user id, except on a
/// filesystem that maps it to another (NFS's root_squash and all_squash make root's files
/// nobody's), where the token file it made is that user's. -1 when no file can be made there.
long uid_of_files_made_in(const std::string& path) {
  const std::string probe = path + "." + std::to_string(::getpid()) + ".owner";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct stat st {};
  const bool known = ::fstat(fd, &st) == 0;
  ::close(fd);
  ::unlink(probe.c_str());
  return known ? static_cast<long>(st.st_uid) : -1;
}

/// The token in the file `path`, checked to be this user's secret; "" when there is no
/// such file.
std::string read_token_file(const std::string& path) {
  // O_NOFOLLOW: a symlink planted in a shared --out must not redirect the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return "";
    if (errno == ELOOP)
      throw InputError(quote(path) + " is a symbolic link; the run's token must be a file of your own: remove it");
    throw SystemError("cannot open " + quote(path), errno);
  }
  struct stat st {};
  std::string content(kMaxDigits + 2, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, content.data(), content.size());
  const int err = errno;
  ::close(fd);
  if (!S_ISREG(st.st_mode))
    throw InputError(quote(path) + " is not a regular file; the run's token must be a file of your own: remove it");
  if (n < 0) throw SystemError("cannot read " + quote(path), err);
  if (st.st_uid != ::geteuid() && st.st_uid != uid_of_files_made_in(path))
    throw InputError(quote(path) + " belongs to user id " + std::to_string(st.st_uid) +
                     ", not to you; another user could know the run's token: remove it, and the next run makes a new one");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw InputError(quote(path) + " has mode " + mode +
                     ", so other users may read or change the run's token; it must be 0600: remove it, and the next "
                     "run makes a new one");
  }
  content.resize(static_cast<size_t>(n));
  while (!content.empty() && (content.back() == '\n' || content.back() == '\r')) content.pop_back();
  std::string token = as_token(content);
  if (token.empty())
    throw InputError(quote(path) + " does not hold a run token (32 to 128 hex digits on one line); remove it, and "
                     "the next run makes a new one");
  return token;
}

/// Makes `path` hold a fresh token unless another rank got there first: the token is
/// written to a file of this process's own, then linked to `path`, which fails with
/// EEXIST when another rank's link won. Either way the caller reads `path` next.
void make_token_file(const std::string& path) {
  const std::string mine = path + "." + std::to_string(::getpid()) + "." + make_run_token().substr(0, 8) + ".new";
  const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw SystemError("cannot create " + quote(mine) + " for the run's token", errno);
  const std::string line = make_run_token() + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!written) {
    ::unlink(mine.c_str());
    throw SystemError("cannot write " + quote(mine), err);
  }
  const bool linked = ::link(mine.c_str(), path.c_str()) == 0;
  const int link_err = errno;
  ::unlink(mine.c_str());
  if (!linked && link_err != EEXIST) throw SystemError("cannot link " + quote(path), link_err);
}

}  // namespace

std::string make_run_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

RunToken run_token(const std::map<std::string, std::string>& env, const std::string& out_dir) {
  if (auto it = env.find(kRunTokenEnv); it != env.end()) {
    std::string token = as_token(it->second);
    if (token.empty())
      throw UsageError(std::string(kRunTokenEnv) + ": expected 32 to 128 hex digits, got " +
                       std::to_string(it->second.size()) + " character(s); make one with `openssl rand -hex 16`, or "
                       "unset it to let dpinfer choose");
    return {token, kRunTokenEnv};
  }
  const std::string path = out_dir + "/" + kRunTokenFile;
  std::string token = read_token_file(path);
  if (token.empty()) {
    make_token_file(path);
    token = read_token_file(path);
    if (token.empty()) throw Error(quote(path) + " vanished as soon as it was made; is another run cleaning --out?");
  }
  return {token, path};
}

std::string run_token_fingerprint(const std::string& token) {
  uint32_t h = 2166136261u;
  for (unsigned char c : token) h = (h ^ c) * 16777619u;
  char out[9];
  std::snprintf(out, sizeof out, "%08x", h);
  return out;
}

}  // namespace dpinfer::plan

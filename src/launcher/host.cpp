#include "dpinfer/launcher/host.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "dpinfer/launcher/command_error.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/error.h"

namespace dpinfer::launcher {
namespace {

/// Binds a TCP socket on all interfaces (as c10d's TCPStore server does) to `port`.
/// Returns the bound port, or -errno.
int try_bind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SystemError("socket", errno);
  // TCPStore sets SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int result;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    result = -errno;
  } else {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    result = ntohs(addr.sin_port);
  }
  ::close(fd);
  return result;
}

}  // namespace

int pick_free_port() {
  int port = try_bind(0);
  if (port < 0) throw SystemError("bind(port 0)", -port);
  return port;
}

void check_port_available(int port) {
  int r = try_bind(port);
  if (r == -EADDRINUSE)
    throw Error("--master-port " + std::to_string(port) +
                " is already in use on this host; pick another port, or omit --master-port on a "
                "single node to get a free one");
  if (r == -EACCES)
    throw Error("--master-port " + std::to_string(port) +
                " needs privileges to bind; use a port of 1024 or more");
  if (r < 0) throw SystemError("bind(port " + std::to_string(port) + ")", -r);
}

int count_cuda_devices() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible && (std::strcmp(visible, "") == 0 || std::strcmp(visible, "-1") == 0)) return 0;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe2", errno);
  pid_t pid = ::fork();
  if (pid < 0) throw SystemError("fork", errno);
  if (pid == 0) {
    // Child: load the driver, count, report, exit. Any failure reports 0.
    ::close(fds[0]);
    int count = 0;
    if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
      using InitFn = int (*)(unsigned);
      using CountFn = int (*)(int*);
      auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
      auto get_count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
      if (init && get_count && init(0) == 0 && get_count(&count) != 0) count = 0;
    }
    ssize_t w = ::write(fds[1], &count, sizeof count);
    (void)w;
    ::_exit(0);
  }
  ::close(fds[1]);
  int count = 0;
  ssize_t n;
  do n = ::read(fds[0], &count, sizeof count);
  while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return n == static_cast<ssize_t>(sizeof count) ? count : 0;
}

int count_usable_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string resolve_command(const std::string& name) {
  auto check = [](const std::string& path) -> int {  // 0 ok, else the shell's status
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return exit_status::kNotFound;
    if (S_ISDIR(st.st_mode) || ::access(path.c_str(), X_OK) != 0) return exit_status::kNotExecutable;
    return 0;
  };
  if (name.empty()) throw CommandError("the worker command is empty", exit_status::kNotFound);
  if (name.find('/') != std::string::npos) {
    int r = check(name);
    if (r == exit_status::kNotFound)
      throw CommandError("worker command '" + name + "' does not exist", r);
    if (r != 0) throw CommandError("worker command '" + name + "' is not an executable file", r);
    return name;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  bool found_unexecutable = false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    int r = check(candidate);
    if (r == 0) return candidate;
    if (r == exit_status::kNotExecutable) found_unexecutable = true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (found_unexecutable)
    throw CommandError("worker command '" + name + "' is in PATH but not executable",
                       exit_status::kNotExecutable);
  throw CommandError("worker command '" + name + "' not found in PATH; check its spelling or give its full path",
                     exit_status::kNotFound);
}

}  // namespace dpinfer::launcher

#include "support/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "support/temp_dir.h"

namespace dpinfer::test {
namespace {

std::string temp_path(const char* tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dpinfer-child-" + tag + "-XXXXXX";
  int fd = ::mkstemp(pattern.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  return pattern;
}

}  // namespace

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::vector<std::string>& unset)
    : out_path_(temp_path("out")), err_path_(temp_path("err")), start_(std::chrono::steady_clock::now()) {
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int out = ::open(out_path_.c_str(), O_WRONLY | O_TRUNC);
    int err = ::open(err_path_.c_str(), O_WRONLY | O_TRUNC);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::dup2(in, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    for (const auto& k : unset) ::unsetenv(k.c_str());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  ::unlink(out_path_.c_str());
  ::unlink(err_path_.c_str());
}

void Child::signal(int sig) const { ::kill(pid_, sig); }

std::string Child::err_so_far() const { return read_file(err_path_); }
std::string Child::out_so_far() const { return read_file(out_path_); }

RunResult Child::wait(std::chrono::duration<double> timeout) {
  RunResult r;
  auto deadline = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  int status = 0;
  for (;;) {
    pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!r.timed_out) r.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  r.out = read_file(out_path_);
  r.err = read_file(err_path_);
  return r;
}

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              std::chrono::duration<double> timeout) {
  Child c(argv, env);
  return c.wait(timeout);
}

bool wait_until(const std::function<bool()>& cond, std::chrono::duration<double> timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

namespace {
/// Field 3 (state) and field 4 (ppid) of /proc/PID/stat; false when gone.
bool read_stat(pid_t pid, char* state, pid_t* ppid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close_paren = stat.rfind(')');
  if (stat.empty() || close_paren == std::string::npos) return false;
  int pp = 0;
  if (std::sscanf(stat.c_str() + close_paren + 2, "%c %d", state, &pp) != 2) return false;
  *ppid = pp;
  return true;
}
}  // namespace

bool process_alive(pid_t pid) {
  char state;
  pid_t ppid;
  return read_stat(pid, &state, &ppid) && state != 'Z' && state != 'X';
}

std::vector<pid_t> zombie_children(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    char state;
    pid_t ppid;
    if (pid > 0 && read_stat(pid, &state, &ppid) && ppid == parent && state == 'Z') out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string dpinfer_binary() { return DPINFER_BINARY; }

}  // namespace dpinfer::test

#include "dpinfer/util/process.h"

#include <climits>
#include <cerrno>
#include <cstdlib>
#include <unistd.h>

#include "dpinfer/util/error.h"

extern char** environ;

namespace dpinfer {

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string self_exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw SystemError("readlink(/proc/self/exe)", errno);
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

}  // namespace dpinfer

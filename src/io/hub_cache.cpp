#include "dpinfer/io/hub_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "dpinfer/util/process.h"

namespace dpinfer::io {
namespace {

std::string home_dir() {
  std::string home = getenv_or_empty("HOME");
  if (home.empty())
    if (const passwd* pw = ::getpwuid(::getuid())) home = pw->pw_dir ? pw->pw_dir : "";
  return home;
}

/// os.path.expanduser for the forms the cache variables take: "~" and "~/…".
std::string expand_user(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) return home_dir() + path.substr(1);
  return path;
}

}  // namespace

std::string hf_hub_cache_dir(std::string* origin) {
  std::string from;
  std::string path;
  if (!(path = getenv_or_empty("HF_HUB_CACHE")).empty()) {
    from = "HF_HUB_CACHE";
  } else if (!(path = getenv_or_empty("HUGGINGFACE_HUB_CACHE")).empty()) {
    from = "HUGGINGFACE_HUB_CACHE";
  } else if (!(path = getenv_or_empty("HF_HOME")).empty()) {
    path = expand_user(path) + "/hub";
    from = "HF_HOME/hub";
  } else if (!(path = getenv_or_empty("XDG_CACHE_HOME")).empty()) {
    path = expand_user(path) + "/huggingface/hub";
    from = "XDG_CACHE_HOME/huggingface/hub";
  } else {
    path = home_dir() + "/.cache/huggingface/hub";
    from = "~/.cache/huggingface/hub";
  }
  if (origin) *origin = from;
  return expand_user(path);
}

bool is_hub_id(const std::string& id) {
  static const std::regex pattern(R"(^[A-Za-z0-9_][A-Za-z0-9_.\-]*/[A-Za-z0-9_][A-Za-z0-9_.\-]*$)");
  return std::regex_match(id, pattern) && id.find("--") == std::string::npos &&
         id.find("..") == std::string::npos;
}

std::string hub_repo_cache_dir(const std::string& cache, const std::string& repo) {
  const size_t slash = repo.find('/');
  return cache + "/models--" + repo.substr(0, slash) + "--" + repo.substr(slash + 1);
}

}  // namespace dpinfer::io

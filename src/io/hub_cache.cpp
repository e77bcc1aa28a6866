#include "dpinfer/io/hub_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "dpinfer/util/error.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

namespace fs = std::filesystem;

std::string home_dir() {
  std::string home = getenv_or_empty("HOME");
  if (home.empty())
    if (const passwd* pw = ::getpwuid(::getuid())) home = pw->pw_dir ? pw->pw_dir : "";
  return home;
}

std::vector<std::string> subdirectories(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
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

std::string hf_download_command(const std::string& repo, const std::string& revision, const std::string& file) {
  return "`hf download " + repo + (file.empty() ? "" : " " + file) + (revision.empty() ? "" : " --revision " + revision) +
         "`";
}

// try_to_load_from_cache's lookup (huggingface_hub/file_download.py).
std::string hub_snapshot_dir(const std::string& spec, const std::string& what, std::string* commit_out) {
  const size_t at = spec.rfind('@');
  const std::string repo = at == std::string::npos ? spec : spec.substr(0, at);
  const std::string revision = at == std::string::npos ? "" : spec.substr(at + 1);
  const std::string wanted = revision.empty() ? "main" : revision;
  if (at != std::string::npos &&
      (revision.empty() || fs::path(revision).is_absolute() || revision.find("..") != std::string::npos))
    throw Error("'" + spec + "' has a bad revision after '@'; use org/name@<branch, tag or commit>");

  std::string origin;
  const fs::path cache = hf_hub_cache_dir(&origin);
  const fs::path repo_dir = hub_repo_cache_dir(cache.string(), repo);
  std::error_code ec;
  const std::string local = fs::absolute(spec, ec).string();
  if (!fs::is_directory(repo_dir, ec))
    throw Error(what + " '" + spec + "' is neither " + (what == "model" ? "a directory" : "a file") + " ('" + local +
                "' does not exist) nor in the hugging face cache ('" + repo_dir.string() +
                "' does not exist; the cache is " + origin +
                ", set HF_HUB_CACHE or HF_HOME to use another); dpinfer never downloads: run " +
                hf_download_command(repo, revision) + " first, or pass the " +
                (what == "model" ? std::string("pipeline's directory") : what + " file"));

  std::string commit = wanted;
  const fs::path ref = repo_dir / "refs" / wanted;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    commit.erase(commit.find_last_not_of(" \t\r\n") + 1);
    if (commit.empty() || commit.find('/') != std::string::npos ||
        commit.find("..") != std::string::npos)
      throw Error("'" + ref.string() + "' does not hold a commit hash; the cache is damaged, run " +
                  hf_download_command(repo, revision) + " again");
  }
  const fs::path snapshot = repo_dir / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    const std::vector<std::string> cached = subdirectories(repo_dir / "snapshots");
    throw Error(what + " '" + spec + "' has no snapshot for revision '" + wanted +
                "' in the hugging face cache ('" + snapshot.string() +
                "' does not exist; cached snapshots: " +
                (cached.empty() ? std::string("none") : join(cached)) + "); run " +
                hf_download_command(repo, revision) + ", or pick a cached commit with " + repo + "@<commit>");
  }
  *commit_out = commit;
  return snapshot.string();
}

}  // namespace dpinfer::io

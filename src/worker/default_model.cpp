#include "dpinfer/worker/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "dpinfer/util/error.h"
#include "dpinfer/util/process.h"

namespace dpinfer::worker {

namespace {

/// The places an embedded model may be, in order.
std::vector<std::string> embedded_model_candidates(const std::string& name) {
  std::vector<std::string> candidates;
  if (const char* data = std::getenv("DPINFER_DATA_DIR"); data != nullptr && *data != '\0')
    candidates.push_back(std::string(data) + "/models/" + name);
  const std::string exe = self_exe_dir();
  // Installed: DATADIR/dpinfer/models as seen from LIBEXECDIR/dpinfer, where the worker
  // lives (src/CMakeLists.txt works the relative path out from GNUInstallDirs, so a
  // distribution's own LIBEXECDIR or DATADIR works, and the tree can be moved).
  candidates.push_back(exe + "/" + DPINFER_WORKER_TO_MODELS_DIR + "/" + name);
  // The build tree: the worker in tools/, the models linked at share/dpinfer/models.
  candidates.push_back(exe + "/../share/dpinfer/models/" + name);
  return candidates;
}

}  // namespace

std::optional<std::string> embedded_model_dir(const std::string& name) {
  for (const std::string& dir : embedded_model_candidates(name)) {
    if (::access((dir + "/model_index.json").c_str(), R_OK) == 0) {
      char* real = ::realpath(dir.c_str(), nullptr);
      std::string resolved = real != nullptr ? real : dir;
      std::free(real);
      return resolved;
    }
  }
  return std::nullopt;
}

std::string default_model_dir() {
  if (std::optional<std::string> dir = embedded_model_dir(kDefaultModelName)) return *dir;
  std::string looked;
  for (const std::string& dir : embedded_model_candidates(kDefaultModelName))
    looked += (looked.empty() ? "" : ", ") + dir;
  throw InputError("no --model given, and the default model " + std::string(kDefaultModelName) +
                   " is not installed (looked in " + looked +
                   "); pass --model DIR, set DPINFER_DATA_DIR, or reinstall dpinfer");
}

std::string resolve_embedded_model(const std::string& model) {
  if (model.empty() || model.find('/') != std::string::npos || model == "." || model == ".." ||
      ::access(model.c_str(), F_OK) == 0)
    return model;
  return embedded_model_dir(model).value_or(model);
}

}  // namespace dpinfer::worker

#include "dpinfer/worker/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "dpinfer/util/error.h"
#include "dpinfer/util/process.h"

namespace dpinfer::worker {

std::string default_model_dir() {
  std::vector<std::string> candidates;
  if (const char* data = std::getenv("DPINFER_DATA_DIR"); data != nullptr && *data != '\0')
    candidates.push_back(std::string(data) + "/models/" + kDefaultModelName);
  const std::string exe = self_exe_dir();
  // Installed: DATADIR/dpinfer/models as seen from LIBEXECDIR/dpinfer, where the worker
  // lives (src/CMakeLists.txt works the relative path out from GNUInstallDirs, so a
  // distribution's own LIBEXECDIR or DATADIR works, and the tree can be moved).
  candidates.push_back(exe + "/" + DPINFER_WORKER_TO_MODELS_DIR + "/" + kDefaultModelName);
  // The build tree: the worker in tools/, the models linked at share/dpinfer/models.
  candidates.push_back(exe + "/../share/dpinfer/models/" + kDefaultModelName);
  std::string looked;
  for (const std::string& dir : candidates) {
    if (::access((dir + "/model_index.json").c_str(), R_OK) == 0) {
      char* real = ::realpath(dir.c_str(), nullptr);
      std::string resolved = real != nullptr ? real : dir;
      std::free(real);
      return resolved;
    }
    looked += (looked.empty() ? "" : ", ") + dir;
  }
  throw InputError("no --model given, and the default model " + std::string(kDefaultModelName) +
                   " is not installed (looked in " + looked +
                   "); pass --model DIR, set DPINFER_DATA_DIR, or reinstall dpinfer");
}

}  // namespace dpinfer::worker

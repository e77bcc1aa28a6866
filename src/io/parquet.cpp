// io/parquet.h: loads libdpinfer_parquet.so (src/io/parquet/) with dlopen on first use and calls
// through its table (parquet_api.h). The module is looked for
//  - at $DPINFER_PARQUET_MODULE, when set;
//  - beside the executable's installed place: LIBDIR/dpinfer, as seen from BINDIR (dpinfer) and
//    from LIBEXECDIR/dpinfer (dpinfer-worker);
//  - where this build put it (the build tree's lib/dpinfer), for the build tree's programs and tests.

#include "dpinfer/io/parquet.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "dpinfer/util/error.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/strings.h"
#include "parquet/parquet_api.h"

#ifndef DPINFER_PARQUET_MODULE_NAME
#define DPINFER_PARQUET_MODULE_NAME "libdpinfer_parquet.so"
#endif

namespace dpinfer::io {
namespace {

namespace fs = std::filesystem;

struct Loaded {
  const ParquetApi* api = nullptr;
  std::string why;  ///< when api is null
};

#ifdef DPINFER_HAVE_PARQUET
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const std::string env = getenv_or_empty("DPINFER_PARQUET_MODULE"); !env.empty()) {
    out.push_back(env);
    return out;
  }
  std::string exe_dir;
  try {
    exe_dir = self_exe_dir();
  } catch (const Error&) {
  }
  if (!exe_dir.empty()) {
#ifdef DPINFER_BIN_TO_PARQUET_DIR
    out.push_back((fs::path(exe_dir) / DPINFER_BIN_TO_PARQUET_DIR / DPINFER_PARQUET_MODULE_NAME).lexically_normal());
#endif
#ifdef DPINFER_LIBEXEC_TO_PARQUET_DIR
    out.push_back((fs::path(exe_dir) / DPINFER_LIBEXEC_TO_PARQUET_DIR / DPINFER_PARQUET_MODULE_NAME).lexically_normal());
#endif
  }
#ifdef DPINFER_PARQUET_BUILD_PATH
  out.push_back(DPINFER_PARQUET_BUILD_PATH);
#endif
  return out;
}
#endif

Loaded load() {
  Loaded l;
#ifndef DPINFER_HAVE_PARQUET
  l.why = "this dpinfer was built without parquet support (no pyarrow when it was configured); run tools/setup.sh, "
          "which installs pyarrow into .venv, then configure and build again";
  return l;
#else
  std::string tried;
  for (const std::string& path : candidates()) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + quote(path);
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = ::dlerror();
      l.why = "the parquet module " + quote(path) + " does not load (" + (e ? e : "?") +
              "); it needs libarrow and libparquet from the pyarrow wheel it was built against (.venv, tools/setup.sh)";
      return l;
    }
    using Entry = const ParquetApi* (*)();
    const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "dpinfer_parquet_api"));
    const ParquetApi* api = entry ? entry() : nullptr;
    if (!api || api->version != kParquetApiVersion) {
      l.why = "the parquet module " + quote(path) + " is from another build of dpinfer; build again";
      return l;
    }
    l.api = api;  // never unloaded: Arrow keeps threads and pools for the process's life
    return l;
  }
  l.why = "the parquet module was not found (looked for " + tried +
          "); install dpinfer whole (it goes to LIBDIR/dpinfer), or set DPINFER_PARQUET_MODULE to its path";
  return l;
#endif
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

const ParquetApi& api() {
  const Loaded& l = loaded();
  if (!l.api) throw Error("parquet: " + l.why);
  return *l.api;
}

}  // namespace

bool parquet_support(std::string* why) {
  const Loaded& l = loaded();
  if (!l.api && why) *why = l.why;
  return l.api != nullptr;
}

ParquetTable read_parquet(const std::string& path) {
  const ParquetApi& a = api();
  ParquetTable out;
  std::string error;
  bool input_error = true;
  if (!a.read(path, out, error, input_error)) {
    // Arrow's and Thrift's messages may quote the file's bytes (fuzz_prompt_parquet: "don't know what
    // type: \x0F"): escaped and bounded, as every message holding a file's text is.
    const std::string message = quote(path) + ": " + printable(one_line(error), 1000);
    if (input_error) throw InputError(message);
    throw Error(message);
  }
  return out;
}

std::string encode_parquet(const ParquetTable& table) {
  const ParquetApi& a = api();
  std::string bytes, error;
  if (!a.encode(table, bytes, error)) throw Error("cannot encode a parquet file: " + printable(one_line(error), 1000));
  return bytes;
}

}  // namespace dpinfer::io

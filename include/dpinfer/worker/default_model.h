#pragma once
// The default model, a folder beside the binaries: what `dpinfer generate` and `dpinfer launch PROMPTS`
// use when no --model is given. It is models/dpinfer-shapes-64 in the source tree
// (tools/train/ trains it), found relative to the binary, never to the working
// directory:
//   $DPINFER_DATA_DIR/models/<name>                 an explicit data directory
//   <exe dir>/../share/dpinfer/models/<name>        the build tree (CMake links it there)
//   <exe dir>/../../share/dpinfer/models/<name>     an install: PREFIX/libexec/dpinfer/dpinfer-worker
//                                                   and PREFIX/share/dpinfer/models

#include <string>

namespace dpinfer::worker {

inline constexpr const char* kDefaultModelName = "dpinfer-shapes-64";

/// The default model's directory; throws InputError naming every place looked at
/// when none holds it.
std::string default_model_dir();

}  // namespace dpinfer::worker

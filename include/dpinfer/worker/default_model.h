#pragma once
// The default model, a folder beside the binaries: what `dpinfer generate` and `dpinfer launch PROMPTS`
// use when no --model is given, and the other embedded models, which --model names. It is
// models/dpinfer-shapes-64 in the source tree
// (tools/train/ trains it), found relative to the binary, never to the working
// directory:
//   $DPINFER_DATA_DIR/models/<name>                 an explicit data directory
//   <exe dir>/../share/dpinfer/models/<name>        the build tree (CMake links it there)
//   <exe dir>/../../share/dpinfer/models/<name>     an install: PREFIX/libexec/dpinfer/dpinfer-worker
//                                                   and PREFIX/share/dpinfer/models

#include <optional>
#include <string>

namespace dpinfer::worker {

inline constexpr const char* kDefaultModelName = "dpinfer-shapes-64";

/// The default model's directory; throws InputError naming every place looked at
/// when none holds it.
std::string default_model_dir();

/// The directory of the embedded model `name` (a folder of models/: dpinfer-shapes-64, or
/// dpinfer-shapes-dit-64, the trained flow-matching DiT), looked for as the default model is;
/// nullopt when none of those places holds it.
std::optional<std::string> embedded_model_dir(const std::string& name);

/// --model as given, or, for a bare name (no '/') that is not a path here but names an embedded
/// model, that model's directory: `--model dpinfer-shapes-dit-64` works from any directory.
std::string resolve_embedded_model(const std::string& model);

}  // namespace dpinfer::worker

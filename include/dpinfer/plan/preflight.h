#pragma once
// The checks of a `dpinfer generate` command line that need no LibTorch: cheap looks at
// the prompts file, --out and --model that `dpinfer launch` makes once, before it
// starts any worker (instead of every rank finding the same fault after loading
// LibTorch), and that the worker makes again before it loads the model. Each is
// conservative: it refuses only what the worker would refuse, or what cannot be a
// prompts file, so that no valid setup is turned away.

#include <string>

namespace dpinfer::plan {

/// PROMPTS must be a readable regular file, and not a program (the torchrun habit
/// `dpinfer launch run.py`): a ".py", ".sh" (or another script) name, a "#!" first
/// line, or an executable bit on a file not named .txt or .jsonl is refused with the
/// hint to put a program after "--". A ".json" file is one JSON document, not JSON
/// lines, and is refused too. Every other name is read as text, one prompt per line.
/// "-" (stdin) passes. Throws UsageError.
void check_prompts_path(const std::string& path);

/// --out must be a directory this process can write, or one it can make: the nearest
/// existing ancestor must then be a writable directory. Throws UsageError.
void check_output_dir(const std::string& out);

/// --model, as far as it can be judged without reading the model: an existing
/// directory must hold model_index.json; a path that does not exist must be a hub id
/// (org/name[@revision]) with a folder in the hub cache. An existing file passes (the
/// worker judges it), and so does "" (the default model), and a bare name (no '/') of an
/// embedded model: a folder with model_index.json in $DPINFER_DATA_DIR/models or in
/// share/dpinfer/models beside this binary (bin/ once installed, tools/ in the build tree),
/// where the worker finds it (worker/default_model.h). Throws UsageError with the worker's
/// own advice.
void check_model_spec(const std::string& spec);

}  // namespace dpinfer::plan

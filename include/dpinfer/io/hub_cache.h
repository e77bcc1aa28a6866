#pragma once
// Where huggingface_hub keeps its downloads on this machine, and what a hub id looks
// like: shared by the pipeline's model resolution and the launcher's check of --model
// before it starts any worker. Nothing here touches the network.

#include <string>

namespace dpinfer::io {

/// The hub cache huggingface_hub uses: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
/// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub, with
/// a leading '~' expanded. `origin`, when given, is set to where the path came from
/// ("HF_HUB_CACHE", "~/.cache/huggingface/hub", ...).
std::string hf_hub_cache_dir(std::string* origin = nullptr);

/// huggingface_hub's repo ids: "org/name", each part of letters, digits, '-', '_' and '.'
/// (without "--" or ".."). A revision suffix ("@main") is not part of the id.
bool is_hub_id(const std::string& id);

/// The cache folder of hub id `repo` ("org/name"): CACHE/models--org--name.
std::string hub_repo_cache_dir(const std::string& cache, const std::string& repo);

/// The command that fills the cache with `repo` at `revision` (empty: main), or with one `file` of it:
/// huggingface_hub's `hf` CLI (huggingface-cli before 1.0), in backquotes for a message.
std::string hf_download_command(const std::string& repo, const std::string& revision, const std::string& file = "");

/// The snapshot folder of `spec` ("org/name" or "org/name@revision") in the hub cache, as
/// huggingface_hub's try_to_load_from_cache finds it: refs/<revision> (main by default)
/// holds the commit, and a revision without a ref is taken as the commit itself. `commit`
/// gets the snapshot's commit. Throws Error, naming `what` ("model", "LoRA") and the
/// `hf download` command that fills the cache, when the repo or the snapshot is missing.
std::string hub_snapshot_dir(const std::string& spec, const std::string& what, std::string* commit);

}  // namespace dpinfer::io

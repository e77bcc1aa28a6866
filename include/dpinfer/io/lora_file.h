#pragma once
// Where a LoRA named on the command line, in a --config or in a prompts line is on disk. As
// diffusers' load_lora_weights takes it (loaders/lora_base.py, _best_guess_weight_name), the
// name is a .safetensors file, a folder holding one, or a hub id, here resolved offline in the
// hub cache (io/hub_cache.h): dpinfer never downloads.

#include <string>

namespace dpinfer::io {

/// The absolute path of the LoRA file `given` names:
///  - an existing file: itself;
///  - an existing folder: its one .safetensors file (top level, as diffusers lists a folder);
///  - "org/name[@revision]": the one .safetensors file of that snapshot in the hub cache
///    (any depth, as diffusers lists a repo's files);
///  - "org/name[@revision]/path/in/repo.safetensors": that file of the snapshot.
/// "One file" is diffusers' guess: files whose path has "scheduler", "optimizer" or
/// "checkpoint" are not LoRAs, and pytorch_lora_weights.safetensors wins over the others.
/// Where several remain, diffusers takes the first the hub lists; dpinfer names them and asks
/// for one instead (a guess would change with the listing order).
/// Throws InputError, one line starting with `where`, when nothing or several files fit.
std::string find_lora_file(const std::string& given, const std::string& where);

}  // namespace dpinfer::io

#pragma once
// A component's weights: which safetensors files hold them (named as diffusers and
// transformers save them), and loading them strictly into a torch::nn::Module whose
// parameter and buffer names are the checkpoint's keys.

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// A module name in checkpoint keys that the module calls differently.
struct KeyRename {
  std::string from;  ///< one name, e.g. "proj_attn"
  std::string to;    ///< its replacement, possibly dotted, e.g. "to_out.0"
};

/// How a component's checkpoint keys map onto its module's names before strict matching.
struct KeyRenames {
  /// A key "<path>.<from>.<leaf>" is read as "<path>.<to>.<leaf>", but only when the module
  /// has the new key and not the old one. diffusers' _fix_state_dict_keys_on_load renames
  /// the same way, only when the old key is there, so files already converted load too.
  std::vector<KeyRename> modules;
  /// Keys that are never loaded and never reported missing or unexpected: an exact key, or
  /// a suffix that follows a '.' (transformers skips non-persistent buffers the same way).
  std::vector<std::string> ignored;
};

/// AutoencoderKL: the deprecated attention names of old VAE checkpoints, query/key/value/
/// proj_attn -> to_q/to_k/to_v/to_out.0 (diffusers modeling_utils.py). The shapes stay:
/// those checkpoints stored Linear weights, and diffusers does not reshape them either.
const KeyRenames& vae_key_renames();

/// CLIPTextModel: ignores text_model.embeddings.position_ids, a non-persistent buffer in
/// transformers that older checkpoints still carry.
const KeyRenames& clip_text_key_renames();

/// The weight files of one component folder.
struct WeightFiles {
  std::vector<std::string> files;  ///< the safetensors files to load: one file, or the shards
  std::string index;               ///< the *.safetensors.index*.json read, or empty
  std::string variant;             ///< the variant the files are ("fp16"), or empty
};

/// Finds the weights in `component_dir` the way diffusers' and transformers' from_pretrained
/// do: first a sharded index, then a single file, named diffusion_pytorch_model[.variant] or
/// model[.variant]. An index (…safetensors.index[.variant].json, or the legacy
/// ….variant.safetensors.index.json) is validated: its weight_map must name existing shard
/// files inside the folder that hold exactly the tensors it lists. A non-empty `variant`
/// must be found, else the error lists the weight files that are there. Pickled weights
/// (.bin, .pt, .pth, .ckpt) are refused with an explanation and a conversion command.
/// Throws dpinfer::Error.
WeightFiles find_weight_files(const std::string& component_dir, const std::string& variant = "");

/// Whether `component_dir` has weight files of `variant` (safetensors or pickled), as
/// diffusers' pipeline loader decides which components load the variant.
bool has_weight_variant(const std::string& component_dir, const std::string& variant);

/// How the keys of a component's checkpoint meet its module (see match_keys()).
struct KeyReport {
  size_t matched = 0;                   ///< module keys a file gives, with the module's shape
  std::vector<std::string> missing;     ///< module keys no file gives, in the module's order
  std::vector<std::string> unexpected;  ///< file keys (as the file names them) the module lacks
  /// "<key> is [a,b] in the file but [c,d] in the model", one per key of the wrong shape
  std::vector<std::string> mismatched;

  /// Whether every key matches, so that load_weights() would load the files.
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

/// Matches the keys of `files` (after `renames`) against every defined parameter and buffer
/// of `module`, by name and shape, exactly as load_weights() does before it copies anything;
/// only the files' headers are read. Throws dpinfer::Error for what load_weights() refuses
/// outright: no files, a file that is not valid safetensors, a key given twice, or a dtype
/// dpinfer cannot load.
KeyReport match_keys(const torch::nn::Module& module, const std::vector<std::string>& files,
                     const KeyRenames& renames, const std::string& component);

/// The one-line error load_weights() throws for a `report` that is not ok(): up to 10
/// missing, unexpected and mismatched keys each, with their counts.
std::string key_mismatch_message(const KeyReport& report, const std::vector<std::string>& files,
                                 const std::string& component);

/// Loads `files` into `module`, matching every checkpoint key (after `renames`) against
/// every defined parameter and buffer of `module` by name, as match_keys() does. Anything
/// missing, unexpected or of another shape fails the whole load with key_mismatch_message(),
/// before any parameter is written. Values are converted to each parameter's dtype and
/// copied once, straight from the file mapping into the parameter's storage (on whatever
/// device it lives); the files are unmapped before returning. `component` names the
/// component in messages ("unet"). Throws dpinfer::Error.
void load_weights(torch::nn::Module& module, const std::vector<std::string>& files,
                  const KeyRenames& renames, const std::string& component);

}  // namespace dpinfer::pipeline

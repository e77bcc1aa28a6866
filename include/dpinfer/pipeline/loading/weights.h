#pragma once
// Loading a component's weights strictly into a torch::nn::Module whose parameter and
// buffer names are the checkpoint's keys: every key matched by name and shape before
// anything is copied, then each tensor copied once from the file mapping into its
// parameter, on whatever device and in whatever dtype the parameter has.

#include <c10/core/ScalarType.h>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/pipeline/conversion/tensor_parts.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
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
  /// Whole subtrees of the checkpoint that are never loaded: a file key that starts with
  /// "<prefix>." (Qwen-Image's text encoder file holds the vision tower "visual.*", which the
  /// text path does not use). Never reported missing either.
  std::vector<std::string> ignored_prefixes;
  /// Tied parameters that checkpoints save under either of two names, or both: {alias, key}.
  /// The module has `key` only; a file key `alias` loads into it when the files do not give
  /// `key` itself, and is skipped when they do (transformers ties the two after loading, so
  /// a file's two copies are one parameter). T5EncoderModel's encoder.embed_tokens.weight is
  /// its shared.weight.
  std::vector<std::pair<std::string, std::string>> tied = {};
  /// A key "<from>.<rest>" is read as "<to>.<rest>" when the module has that key and not the
  /// file's: a text model that one transformers version saves under another parent than the
  /// next (Mistral3ForConditionalGeneration's model.language_model and language_model.model).
  std::vector<KeyRename> prefixes = {};
};

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
/// With `convert`, each file's tensors are first mapped by it (a single-file checkpoint).
KeyReport match_keys(const torch::nn::Module& module, const std::vector<std::string>& files,
                     const KeyRenames& renames, const std::string& component, const KeyConverter& convert = {});

/// The module keys that GGUF files among `files` fill with quantized blocks (after `renames` and
/// `convert`, as match_keys() matches them), each with its ggml type: the Linear weights to keep as
/// GGUF blocks (nn::WeightedLayer::store_gguf) before load_weights() copies the file's bytes into them.
/// Empty for safetensors files. Throws as match_keys() does.
std::map<std::string, io::GgmlType> gguf_quantized_keys(const torch::nn::Module& module,
                                                        const std::vector<std::string>& files,
                                                        const KeyRenames& renames, const std::string& component,
                                                        const KeyConverter& convert = {});

/// The one-line error load_weights() throws for a `report` that is not ok(): up to 10
/// missing, unexpected and mismatched keys each, with their counts.
std::string key_mismatch_message(const KeyReport& report, const std::vector<std::string>& files,
                                 const std::string& component);

/// How load_weights() converts the values it copies.
struct LoadOptions {
  /// Set: each value goes through this dtype on its way to the parameter, as when diffusers
  /// loads a component in fp16 and then upcasts it (SDXL's VAE under force_upcast): the
  /// parameter holds exactly what diffusers' upcast one holds.
  std::optional<at::ScalarType> round_through;
  /// Set: each value loaded into a float8 parameter (a layer --weight-storage fp8 stores) goes
  /// through this dtype first, the run dtype: diffusers loads the checkpoint in torch_dtype and
  /// casts to the storage dtype afterwards, and rounding twice is not rounding once. Values for
  /// the other parameters are untouched by it.
  std::optional<at::ScalarType> stored_through;
  /// Set: the files' tensors are read through it (see match_keys()).
  KeyConverter convert;
};

/// Loads `files` into `module`, matching every checkpoint key (after `renames`) against
/// every defined parameter and buffer of `module` by name, as match_keys() does. Anything
/// missing, unexpected or of another shape fails the whole load with key_mismatch_message(),
/// before any parameter is written. Values are converted to each parameter's dtype and
/// copied once, piece by piece, straight from the file mapping into the parameter's storage
/// (on whatever device it lives); the pages of the file leave memory as they are read, and
/// the files are unmapped before returning. `component` names the component in messages
/// ("unet"). Throws dpinfer::Error.
void load_weights(torch::nn::Module& module, const std::vector<std::string>& files, const KeyRenames& renames,
                  const std::string& component, const LoadOptions& options = {});

}  // namespace dpinfer::pipeline

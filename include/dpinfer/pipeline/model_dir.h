#pragma once
// A pipeline directory resolved against the family table: model_index.json's class picks
// the family, and each component the family names is read and checked (its class, its
// folder, its config, the files it needs, its weight variant). Nothing here reads
// weights or touches the network.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/component_role.h"
#include "dpinfer/pipeline/conversion/ldm_keys.h"
#include "dpinfer/pipeline/hub/model_index.h"

namespace dpinfer::pipeline {

struct Family;

/// One component folder of a pipeline directory.
struct Component {
  std::string name;        ///< the model_index.json key: "unet", "text_encoder", ...
  ComponentRole role = ComponentRole::kDenoiser;  ///< what the family uses it for
  std::string library;     ///< "diffusers" or "transformers"
  std::string class_name;  ///< "UNet2DConditionModel", "CLIPTextModel", ...
  std::string path;        ///< absolute path of the folder
  /// The parsed config: config.json (models), scheduler_config.json (scheduler) or
  /// tokenizer_config.json (tokenizer; an empty object when absent).
  nlohmann::json config;
  /// The weight variant to load this component with ("fp16"), or empty for its default
  /// weights: see resolve_model(). Always empty for the tokenizer and the scheduler.
  std::string variant;
  /// Set when the weights are read from a single-file checkpoint (single_file/single_file.h):
  /// its path, the prefix of this component's keys there, and their layout. `path` and
  /// `config` then come from the base the configs are taken from.
  std::string single_file;
  std::string key_prefix;
  CheckpointLayout layout = CheckpointLayout::kTransformersClip;
  /// Where the component comes from, for inspect: "single file (model.diffusion_model.*)",
  /// "--vae DIR", "base DIR"; empty for a plain pipeline directory.
  std::string source;
  /// How its Linear and Conv2d weights are kept between uses: "" (in the run dtype) or "fp8"
  /// (float8_e4m3fn, layerwise casting; loading/layerwise_storage.h). load_text_to_image()
  /// sets it from --weight-storage for the components that value stores.
  std::string weight_storage;
  /// "" or --fp8-compute's "tensorwise" / "rowwise", for the denoiser: its blocks' Linear layers
  /// multiply in float8 (loading/fp8_compute.h).
  std::string fp8_compute;
};

/// What a single-file checkpoint was found to be (single_file/single_file.h).
struct SingleFileInfo {
  std::string path;     ///< the checkpoint
  std::string kind;     ///< "sd1", "sd2", "sdxl", "flux-dev", "flux-schnell", "chroma", "sd3", "qwen-image", ...
  std::string label;    ///< "Stable Diffusion 1.x (LDM single file)", "FLUX.1 [dev] (BFL FLUX.1 transformer file)", ...
  std::string variant;  ///< what was detected beyond the family, e.g. "v_prediction (...)"
  std::string base;     ///< where the configs come from: the --base given, or the shipped default's folder
  bool shipped_base = false;  ///< `base` is dpinfer's shipped default config
  /// A GGUF file's storage of its transformer ("gguf-Q4_K": loading/gguf_storage.h), else empty.
  std::string weight_storage;
};

/// The options that complete a single-file checkpoint: --base, --text-encoder(-2), --vae.
struct SingleFileOptions {
  std::string base;            ///< a diffusers directory or hub id: its configs, and components the file lacks
  std::string text_encoder;    ///< a transformers CLIPTextModel folder (config.json + weights)
  std::string text_encoder_2;  ///< SDXL's second text encoder folder
  std::string vae;             ///< a diffusers AutoencoderKL folder

  bool empty() const { return base.empty() && text_encoder.empty() && text_encoder_2.empty() && vae.empty(); }
};

/// A resolved pipeline directory.
struct ModelDir {
  std::string spec;            ///< what the user passed
  /// What the images record as their model: the hub id as given, or the directory's
  /// own name (not its path, which differs between machines and says where a user's files are).
  std::string name;
  std::string root;            ///< absolute path of the folder holding model_index.json
  std::string revision;        ///< the snapshot's commit when found in the hub cache, else empty
  nlohmann::json model_index;  ///< model_index.json as parsed
  const Family* family = nullptr;
  /// The family's components that are there, in the family's order.
  std::vector<Component> components;
  /// The other components model_index.json names and the family does not use, such as
  /// "safety_checker (StableDiffusionSafetyChecker)".
  std::vector<std::string> ignored_components;
  /// Set when `spec` is a single-file checkpoint.
  std::optional<SingleFileInfo> single_file;

  /// The component called `name`, or nullptr (an optional one that is absent).
  const Component* find(const std::string& name) const;
  /// The component called `name`; throws Error when it is absent.
  const Component& at(const std::string& name) const;
};

/// A problem resolve_model() found with one component when asked to collect them.
struct ModelDirError {
  std::string component;  ///< "unet", ...; empty for the --variant check across components
  std::string message;    ///< what resolve_model() without `errors` throws for it
};

/// Resolves `spec` (see read_model_index()) and checks it against its family:
/// model_index.json's _class_name must be one a family serves, and each component the
/// family names must be there (unless optional), be a class the family accepts, and
/// have its folder, its config, and the files its class needs. With a non-empty
/// `variant`, each component with weights gets that variant when its folder has such
/// weight files and its default weights otherwise, as diffusers' pipeline loader does
/// (the caller may log which fell back: those whose Component::variant stays empty); at
/// least one must have it. Throws dpinfer::Error with what was looked at and what to do.
///
/// With `errors` (for `dpinfer inspect`, which reports every problem at once), a component
/// that fails is appended to it instead, in the family's order, and is left in
/// `components` with what was read of it before the failure (its name always; its library,
/// class and folder when model_index.json gives them; its config when that parsed); the
/// others are still read. The first entry is what the call without `errors` throws.
/// Problems before the components (the path, the cache, model_index.json itself, the
/// family) still throw.
///
/// A `spec` that is a file is a single-file checkpoint: see resolve_single_file(), which
/// `single_file` completes (and which must be empty for a directory).
ModelDir resolve_model(const std::string& spec, const std::string& variant = "",
                       std::vector<ModelDirError>* errors = nullptr, const SingleFileOptions& single_file = {});

}  // namespace dpinfer::pipeline

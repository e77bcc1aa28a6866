#pragma once
// Where a model lives: a diffusers pipeline directory given as a path, or a Hugging Face
// hub id found offline in the local hub cache, and the checked contents of its
// model_index.json and component configs. Nothing here touches the network.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// One component folder of a pipeline directory.
struct Component {
  std::string name;        ///< the model_index.json key: "unet", "text_encoder", ...
  std::string library;     ///< "diffusers" or "transformers"
  std::string class_name;  ///< "UNet2DConditionModel", "CLIPTextModel", ...
  std::string path;        ///< absolute path of the folder
  /// The parsed config: config.json (unet, vae, text_encoder), scheduler_config.json
  /// (scheduler) or tokenizer_config.json (tokenizer; an empty object when absent).
  nlohmann::json config;
  /// The weight variant to load this component with ("fp16"), or empty for its default
  /// weights: see resolve_model(). Always empty for the tokenizer and the scheduler.
  std::string variant;
};

/// A resolved Stable Diffusion pipeline directory.
struct ModelDir {
  std::string spec;            ///< what the user passed
  /// What the images record as their model: the hub id as given, or the directory's
  /// own name (not its path, which differs between machines and says where a user's files are).
  std::string name;
  std::string root;            ///< absolute path of the folder holding model_index.json
  std::string revision;        ///< the snapshot's commit when found in the hub cache, else empty
  nlohmann::json model_index;  ///< model_index.json as parsed
  Component unet;
  Component text_encoder;
  Component tokenizer;
  Component vae;
  Component scheduler;
  /// The other components model_index.json names and dpinfer does not use, such as
  /// "safety_checker (StableDiffusionSafetyChecker)", for the caller's debug log.
  std::vector<std::string> ignored_components;
};

/// The hub cache huggingface_hub uses: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
/// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub, with
/// a leading '~' expanded. `origin`, when given, is set to where the path came from
/// ("HF_HUB_CACHE", "~/.cache/huggingface/hub", ...).
std::string hf_hub_cache_dir(std::string* origin = nullptr);

/// A problem resolve_model() found with one component when asked to collect them.
struct ModelDirError {
  std::string component;  ///< "unet", ...; empty for the --variant check across components
  std::string message;    ///< what resolve_model() without `errors` throws for it
};

/// Resolves `spec` to a Stable Diffusion pipeline directory:
/// - an existing directory that holds model_index.json, or else
/// - a hub id "org/name" or "org/name@revision" (a branch, tag or commit; "main" when
///   omitted) found in hf_hub_cache_dir() as models--org--name/refs/<revision> ->
///   snapshots/<commit>/, without any network access.
/// model_index.json must name a StableDiffusionPipeline with the components unet,
/// text_encoder, tokenizer, vae and scheduler, each a folder with its config (and the
/// tokenizer with vocab.json and merges.txt); safety_checker and feature_extractor are
/// ignored. With a non-empty `variant`, each of unet, text_encoder and vae gets that
/// variant when its folder has such weight files and its default weights otherwise, as
/// diffusers' pipeline loader does (the caller may log which fell back: those whose
/// Component::variant stays empty); at least one must have it. Throws dpinfer::Error
/// with what was looked at and what to do.
///
/// With `errors` (for `dpinfer inspect`, which reports every problem at once), a component
/// that fails is appended to it instead, in the order above, left with what was read of it
/// before the failure (its name always; its library, class and folder when model_index.json
/// gives them; its config when that parsed), and the others are still read; the first entry
/// is what the call without `errors` throws. Problems before the components (the path, the
/// cache, model_index.json itself) still throw.
ModelDir resolve_model(const std::string& spec, const std::string& variant = "",
                       std::vector<ModelDirError>* errors = nullptr);

}  // namespace dpinfer::pipeline

#pragma once
// `dpinfer inspect`: what a model directory holds and whether the pipeline would load it,
// found by the same calls StableDiffusionPipeline makes when it loads, in the same order,
// but reading only configs and safetensors headers, never the weights themselves.

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/weights.h"

namespace dpinfer::pipeline {

/// The tensors of one dtype in a component's weight files.
struct DtypeCount {
  int64_t tensors = 0;
  int64_t parameters = 0;  ///< elements
};

/// One model component (text_encoder, unet or vae).
struct ComponentReport {
  std::string name;        ///< "unet"
  std::string library;     ///< "diffusers" or "transformers"
  std::string class_name;  ///< "UNet2DConditionModel"
  std::string path;        ///< its folder
  /// The resolved config's key facts (an empty object when the config did not parse).
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  /// The weight files find_weight_files() picked: absolute paths, and the index read.
  std::vector<std::string> files;
  std::string index;
  std::string variant;     ///< the variant loaded ("fp16"), or empty for the plain weights
  bool fell_back = false;  ///< a --variant was asked for but this component has none
  /// From the files' headers: elements and bytes over every tensor, and per dtype ("F16").
  int64_t parameters = 0;
  uint64_t bytes = 0;
  std::map<std::string, DtypeCount> dtypes;
  /// The strict key check against the module built from the config; unset when it could
  /// not run (the config or the files failed first).
  std::optional<KeyReport> keys;
  /// The first error loading this component throws, or empty.
  std::string error;
};

/// A special token of the tokenizer.
struct SpecialToken {
  std::string token;
  int64_t id = 0;
};

struct TokenizerReport {
  std::string class_name;
  std::string path;
  size_t vocab_size = 0;  ///< entries of vocab.json
  int model_max_length = 0;
  SpecialToken bos, eos, pad, unk;
  std::string error;  ///< what CLIPTokenizer::from_dir() throws, or empty
};

struct SchedulerReport {
  std::string class_name;       ///< scheduler_config.json's _class_name
  std::string path;
  std::string requested;        ///< the --scheduler name asked for, or empty for the config's own class
  /// What make_scheduler() builds from the config and `requested` ("pndm"), when it can: the
  /// scheduler `dpinfer generate` would use.
  std::string dpinfer_name;
  std::string prediction_type;  ///< as the config says, or empty when unset (epsilon)
  std::string timestep_spacing; ///< as the config says, or empty when unset (the class default)
  std::string error;            ///< what make_scheduler() throws, or empty
};

/// What inspect_model() found. ok() is whether load_stable_diffusion() would load the model;
/// when not, `error` is the message it would fail with.
struct InspectReport {
  std::string spec;      ///< as given
  std::string variant;   ///< as given
  std::string variant_error;  ///< resolve_model()'s "no such variant in any component", or empty
  std::string root;      ///< the resolved directory; empty when resolve_model() failed
  std::string revision;  ///< the hub cache snapshot's commit, or empty
  std::string pipeline;  ///< model_index.json's _class_name
  ComponentReport text_encoder, unet, vae;
  TokenizerReport tokenizer;
  SchedulerReport scheduler;
  /// The pipeline's default image size, {height, width}: the UNet's sample_size (64 when it
  /// has none) times the VAE's scale factor; unset when either config failed.
  std::optional<std::array<int64_t, 2>> default_size;
  std::vector<std::string> ignored_components;  ///< "safety_checker (StableDiffusionSafetyChecker)"
  /// The first error in the pipeline's load order, one line, or empty.
  std::string error;
  /// Whether `error` is bad input (a dpinfer::Error: the model, its configs or files) rather
  /// than an internal failure such as running out of memory.
  bool bad_input = true;

  bool ok() const { return error.empty(); }
  /// Everything above, for scripts: {"model", "path", ..., "ok", "error", "components": {...}}.
  nlohmann::ordered_json to_json() const;
  /// The report for people, several lines ending in '\n'; `error` is not in it.
  std::string to_text() const;
};

/// Inspects `spec` (a directory or a hub id, see resolve_model()) with `variant` ("fp16" or
/// empty) and `scheduler` (a --scheduler name, or empty for the model's own) the way
/// load_stable_diffusion() loads it: resolve_model(), the tokenizer, the text encoder, UNet
/// and VAE configs, then for each of those three its module built from the config, its
/// weight files and the strict key check of match_keys(), then make_scheduler(). Every step
/// runs even after one fails, where it still can (resolve_model() collects the components'
/// errors rather than stopping at the first), so the report shows every problem; `error` is
/// the one loading would have stopped at. The modules are built on the
/// CPU in float16 (LibTorch modules cannot be built without storage), one at a time: the
/// largest component's parameters in float16 is the memory this needs. Never throws: a
/// step that fails records its error and the report says what it could.
InspectReport inspect_model(const std::string& spec, const std::string& variant = "",
                            const std::string& scheduler = "");

}  // namespace dpinfer::pipeline

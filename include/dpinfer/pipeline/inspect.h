#pragma once
// `dpinfer inspect`: what a model directory holds and whether its family's pipeline would
// load it, found by the same calls the pipeline makes when it loads, in the same order,
// but reading only configs and safetensors headers, never the weights themselves. Generic
// over the family table, the model-class table, the tokenizer table and the scheduler table.

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/lora_inspect.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/settings.h"
#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// The tensors of one dtype in a component's weight files.
struct DtypeCount {
  int64_t tensors = 0;
  int64_t parameters = 0;  ///< elements
};

/// One component with weights (a text encoder, denoiser or VAE).
struct ComponentReport {
  std::string name;        ///< "unet"
  std::string library;     ///< "diffusers" or "transformers"
  std::string class_name;  ///< "UNet2DConditionModel"
  std::string path;        ///< its folder (of its config, for a component read from a single file)
  std::string source;      ///< where it comes from, for a single-file checkpoint (Component::source)
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
  /// From the module built from the config (no files needed): the elements of its parameters and
  /// buffers, what loads on the device, and those of the layers --weight-storage fp8 keeps in
  /// float8 (layerwise_storage.h). 0 when it could not be built.
  int64_t module_elements = 0;
  int64_t stored_elements = 0;
  /// Of those, the elements in the transformer's offloadable block lists (nn::OffloadableBlocks): all
  /// blocks, and the largest block, with their fp8-stored elements. 0 for a model without block lists.
  int64_t block_elements = 0, block_stored_elements = 0;
  int64_t largest_block_elements = 0, largest_block_stored_elements = 0;
  /// A GGUF file's tensor bytes (kept as stored on the device), or 0.
  int64_t gguf_bytes = 0;
  /// The first error loading this component throws, or empty.
  std::string error;
};

struct TokenizerReport {
  std::string name;  ///< "tokenizer", "tokenizer_2"
  std::string class_name;
  std::string path;
  size_t vocab_size = 0;
  int model_max_length = 0;
  std::vector<SpecialToken> special_tokens;
  std::string error;  ///< what loading the tokenizer throws, or empty

  /// The special token of `role` ("bos", "eos", "pad", "unk"), or an empty one.
  SpecialToken special(const std::string& role) const;
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
  /// The --scheduler-set keys written into the config before it is read (scheduler_settings.h).
  nlohmann::json settings = nlohmann::json::object();
};

/// What inspect_model() found. ok() is whether load_text_to_image() would load the model;
/// when not, `error` is the message it would fail with.
struct InspectReport {
  std::string spec;      ///< as given
  std::string variant;   ///< as given
  std::string variant_error;  ///< resolve_model()'s "no such variant in any component", or empty
  std::string root;      ///< the resolved directory; empty when resolve_model() failed
  std::string revision;  ///< the hub cache snapshot's commit, or empty
  std::string pipeline;  ///< model_index.json's _class_name
  std::string family;    ///< the family table's name for it, or empty when none serves it
  /// Set for a single-file checkpoint: its kind, detected variant and base.
  std::optional<SingleFileInfo> single_file;
  /// The components with weights: text encoders, then denoisers, then VAEs, each in the
  /// family's order (for Stable Diffusion: text_encoder, unet, vae).
  std::vector<ComponentReport> models;
  std::vector<TokenizerReport> tokenizers;
  SchedulerReport scheduler;
  /// The pipeline's default image size, {height, width}; unset when a config it needs failed.
  std::optional<std::array<int64_t, 2>> default_size;
  std::vector<std::string> ignored_components;  ///< "safety_checker (StableDiffusionSafetyChecker)"
  /// The family's settings (`--set NAME=VALUE`), with their defaults; empty when no family serves it.
  std::vector<SettingSpec> settings;
  /// One per --lora, in the order given (lora_inspect.h); their errors come after the model's.
  std::vector<LoraReport> loras;
  /// The first error in the pipeline's load order, one line, or empty.
  std::string error;
  /// Whether `error` is bad input (a dpinfer::Error: the model, its configs or files) rather
  /// than an internal failure such as running out of memory.
  bool bad_input = true;

  bool ok() const { return error.empty(); }
  /// The component with weights called `name`; throws Error when the report has none.
  const ComponentReport& component(const std::string& name) const;
  /// The tokenizer called `name`; throws Error when the report has none.
  const TokenizerReport& tokenizer(const std::string& name = "tokenizer") const;
  /// Everything above, for scripts: {"model", "path", ..., "ok", "error", "components": {...}}.
  nlohmann::ordered_json to_json() const;
  /// The report for people, several lines ending in '\n'; `error` is not in it.
  std::string to_text() const;
  /// `dpinfer inspect --memory`: the bytes of each component's weights on the device in `dtype`
  /// ("bf16"), with each --weight-storage, and their sum. Weights only: activations come on top.
  std::string memory_text(const std::string& dtype) const;
};

/// Inspects `spec` (a directory or a hub id, see read_model_index()) with `variant` ("fp16"
/// or empty) and `scheduler` (a --scheduler name, or empty for the model's own) the way
/// load_text_to_image() loads it: resolve_model(), the tokenizers, the configs of the
/// components with weights, the scheduler, then for each component with weights its
/// module built from its config on the meta device (no memory), its weight files and the
/// strict key check of match_keys(). Every step runs even after one fails, where it still
/// can (resolve_model() collects the components' errors rather than stopping at the
/// first), so the report shows every problem; `error` is the one loading would have
/// stopped at. Never throws: a step that fails records its error and the report says
/// what it could.
/// A single-file `spec` is completed by `single_file` (--base, --text-encoder, --vae).
/// Each of `loras` is then checked against the modules built for the key check (inspect_lora()):
/// its error, if any, is the report's when the model itself loads. `scheduler_settings` are
/// --scheduler-set's keys, applied and checked as load_text_to_image() applies them.
InspectReport inspect_model(const std::string& spec, const std::string& variant = "",
                            const std::string& scheduler = "", const SingleFileOptions& single_file = {},
                            const io::LoraSet& loras = {},
                            const nlohmann::json& scheduler_settings = nlohmann::json::object());

}  // namespace dpinfer::pipeline

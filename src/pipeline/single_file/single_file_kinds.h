#pragma once
// The kinds of single file dpinfer reads, one row each: what a kind is called, which pipeline class runs it,
// whether dpinfer ships its configs, where each component's weights sit in such a file, and what a DiT file's
// keys say of its transformer's config. single_file.cpp resolves a file by its kind's row and asks nothing else
// of the kind; a new kind is one row here (and its detection, dit_detection.cpp or ldm_detection.cpp).
// Names and shapes only: free of LibTorch.

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/conversion/ldm_keys.h"

namespace dpinfer::pipeline::single_file_table {

/// Where one component's weights sit in a kind's files.
struct ComponentSlot {
  std::string component;  ///< "unet", "transformer", "vae", "text_encoder", "text_encoder_2"
  std::string prefix;
  CheckpointLayout layout;
  std::string option;     ///< the option that supplies it when the file lacks it; empty: none can
  bool in_file = true;    ///< false: the kind's files never hold it (a DiT file is the transformer only)
};

/// What a DiT transformer file's keys say of its config: (config field, value) pairs.
using ConfigFacts = std::vector<std::pair<std::string, nlohmann::json>>;

struct Kind {
  std::string kind;            ///< "flux-dev", as --model's messages and info.kind name it
  std::string label;           ///< "FLUX.1 [dev]"
  std::string pipeline_class;  ///< the family table's class that runs it
  /// dpinfer ships its configs (configs/single_file/<kind>); not for SD3 and Chroma, whose tokenizers (T5's) are
  /// not in the file and for which dpinfer ships no vocabulary: those need --base.
  bool shipped_base = true;
  /// The components and where the file keeps them (the prefix of a DiT file's transformer is the file's own,
  /// "" or ComfyUI's "model.diffusion_model.").
  std::vector<ComponentSlot> (*slots)(const std::string& transformer_prefix) = nullptr;
  /// A DiT file's config facts (fit against its base's config); null for an LDM file.
  ConfigFacts (*config_facts)(const std::string& prefix, const std::vector<SourceTensor>& tensors) = nullptr;
  /// What the file is, after the label: "SD3 MMDiT single file", "LDM single file"; empty: the DiT file's
  /// layout ("BFL FLUX.1 transformer file").
  std::string file_kind;
  /// A pipeline to name as --base, in the message for a kind without shipped configs.
  std::string base_example;
  /// The shipped configs' tokenizer_2 is an offline stand-in for T5's vocabulary (FLUX.1), so a run needs
  /// T5's own from --text-encoder-2 or --base.
  bool shipped_t5_vocabulary_stand_in = false;
};

/// Every kind, in the order `dpinfer inspect --families` lists them.
const std::vector<Kind>& kinds();

/// The row of `kind`, or nullptr.
const Kind* find(const std::string& kind);

/// The row of `kind`, which detection or a base named; Error when the table has none (an internal error).
const Kind& at(const std::string& kind);

}  // namespace dpinfer::pipeline::single_file_table

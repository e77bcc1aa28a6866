#pragma once
// The memory plan of a rank (issue 26 item 6): from the weights of each component (counted from the
// modules built on the meta device, as `inspect --memory` counts them) and an estimate of each phase's
// working memory at the run's shape, the device bytes of each phase (encode, denoise, decode) under a
// choice of where the weights live and how they are stored; and, for a budget, the first choice in order
// of cost that fits.
//
// The order of cost. First what keeps the pixels: everything resident; two-phase (the text encoders and
// the denoiser never on the device together), on the CPU then in chunks of one batch; --offload model; --offload blocks (with two-phase). Then what
// changes them, each again with those four: --vae-tiling (only where the image is larger than a tile),
// --weight-storage fp8-denoiser, fp8-denoiser with tiling, fp8, fp8 with tiling. `exact` stops before the
// first that changes pixels. On the CPU the device is the host memory: offload saves nothing there, so
// only everything resident and two-phase are tried.
//
// What the user chose explicitly (--weight-storage, --offload, --vae-tiling, --encode-chunk) stays: the
// plan only adds what was left at its default.
//
// The activations are estimates, not measurements: per phase, a coefficient times the size of the
// largest tensors that scale with the image (tokens × width for a transformer, pixels × channels for a
// UNet or a VAE). The coefficients were measured with the counting allocator of device_memory.h on the
// real models' shapes (tools/bench/memory_plan.sh; docs/memory.md gives the figures); the estimate is the
// measured peak at those shapes, rounded up.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/component_role.h"

namespace dpinfer::pipeline {

struct InspectReport;
struct LoadRequest;
struct MemoryRequest;

/// One component's weights and geometry, from inspect_model()'s report.
struct ComponentFootprint {
  std::string name;
  std::string class_name;
  ComponentRole role = ComponentRole::kVae;
  int64_t elements = 0;         ///< parameters and buffers
  int64_t stored_elements = 0;  ///< those --weight-storage fp8 keeps in float8
  /// The transformer blocks (`<list>.<index>.` parameters): all of them, and the largest one.
  int64_t block_elements = 0, block_stored_elements = 0;
  int64_t largest_block_elements = 0, largest_block_stored_elements = 0;
  /// A GGUF file's tensor bytes, kept as stored on the device; 0 for other files.
  int64_t gguf_bytes = 0;
  nlohmann::ordered_json facts;  ///< the config's key facts (ModelClass::facts)
};

/// Where the weights live and how they are stored: what the plan chooses.
struct MemoryLevers {
  bool two_phase = false;
  /// Two-phase's chunk in items; 0: the shape's encode_chunk. On the CPU, where the chunk's encodings take
  /// the device's memory, a chunk of one batch is the next choice after the shape's.
  int64_t encode_chunk = 0;
  std::string offload = "none";  ///< none, model or blocks
  int blocks_per_group = 1;
  bool vae_tiling = false;
  std::string weight_storage = "default";  ///< default, fp8-denoiser or fp8

  /// "two-phase, --offload blocks:1, --weight-storage fp8", or "everything resident".
  std::string describe() const;
  /// Whether the pixels differ from those of a run with every lever at its default.
  bool changes_pixels() const { return vae_tiling || weight_storage != "default"; }
  nlohmann::ordered_json to_json() const;
};

/// The run's shape: what the activations scale with.
struct MemoryShape {
  int64_t width = 0, height = 0;
  int64_t batch_size = 1;
  std::string dtype = "bf16";      ///< fp32, fp16 or bf16
  bool cuda = false;               ///< a CUDA device (else the CPU)
  bool guidance = true;            ///< classifier-free guidance: two denoiser rows per image
  int64_t text_tokens = 512;       ///< the longest text sequence the denoiser attends to
  int64_t encode_chunk = 64;       ///< items whose encodings two-phase holds at once
  /// The pixels of an item's references at most, all together (FLUX.1 Kontext, FLUX.2), whose tokens join the
  /// denoiser's sequence; 0: none.
  int64_t reference_pixels = 0;
  /// The largest LoRA set's factors and the weights they touch, in elements (lora_footprint()): on the GPU an
  /// unfused component's factors (stored weights) stay on the device; merged layers' factors and the touched
  /// weights' originals wait in host memory, which is the device on the CPU.
  int64_t lora_factor_elements = 0, lora_touched_elements = 0;
};

/// Bytes per phase. `weights` are the weights on the device during the phase, `activations` the rest.
struct PhaseBytes {
  double weights = 0, activations = 0;
  double total() const { return weights + activations; }
};

struct MemoryEstimate {
  MemoryLevers levers;
  PhaseBytes encode, denoise, decode;
  /// The largest phase's total, and its name ("encode", "denoise" or "decode").
  double peak() const;
  std::string peak_phase() const;
  /// The bytes of the phase peak_phase() names.
  const PhaseBytes& peak_phase_bytes() const;
  nlohmann::ordered_json to_json() const;
};

class MemoryPlanner {
 public:
  /// The pipeline's components (from inspect_model(), whose modules must have built) and the run's shape.
  MemoryPlanner(const InspectReport& report, MemoryShape shape);
  MemoryPlanner(std::vector<ComponentFootprint> components, MemoryShape shape)
      : components_(std::move(components)), shape_(std::move(shape)) {}

  /// The device bytes of each phase with `levers`.
  MemoryEstimate estimate(const MemoryLevers& levers) const;

  /// Every choice the plan would try from `fixed` (the user's explicit levers), in order of cost.
  struct Fixed {
    std::optional<bool> two_phase;
    std::optional<std::string> offload;  ///< "none", "model" or "blocks"
    int blocks_per_group = 1;
    std::optional<bool> vae_tiling;
    std::optional<std::string> weight_storage;
  };
  std::vector<MemoryLevers> candidates(const Fixed& fixed, bool exact) const;

  /// The first candidate whose peak fits `budget` bytes. Throws OutOfMemoryPlan (one line: the budget,
  /// the smallest peak and its phase, and what to do) when none does.
  MemoryEstimate choose(double budget, const Fixed& fixed, bool exact) const;

  /// The candidate after `chosen` in the order of cost from `fixed`, or unset: what to try after an
  /// out-of-memory error.
  std::optional<MemoryLevers> next_after(const MemoryLevers& chosen, const Fixed& fixed, bool exact) const;

  const std::vector<ComponentFootprint>& components() const { return components_; }
  const MemoryShape& shape() const { return shape_; }

 private:
  double weight_bytes(const ComponentFootprint& c, const std::string& storage) const;
  /// Whether a component comes from a GGUF file (kept quantized; no --weight-storage choice).
  bool has_gguf_component() const;
  std::vector<ComponentFootprint> components_;
  MemoryShape shape_;
};

/// `dpinfer inspect --memory`'s plan: each phase's estimate for every choice the plan tries at `shape`, in
/// order of cost, and with `budget` (bytes) the one it would choose, or why none fits. Several lines.
std::string memory_plan_text(const InspectReport& report, const MemoryShape& shape, std::optional<double> budget,
                             bool exact);

/// What plan_memory() chose.
struct MemoryPlanChoice {
  double budget = 0;          ///< bytes
  std::string choice;         ///< the levers, the estimated peak and its phase, the budget
  std::string summary;        ///< one line for the log: the device and the shape, then `choice`
  std::string next;           ///< what to try after an out-of-memory error ("--offload blocks:1, ..."), or ""
  nlohmann::ordered_json record;  ///< run.json's "memory_plan"
};

/// The most pixels a reference image of a `pipeline_class` model may have once sized (0: its images are no
/// references), as its family row's reference_facts says (families/family.h): FLUX.2's 1024^2 cap, Qwen-Image-Edit's
/// 1088^2, FLUX.1 Kontext's largest preferred resolution with auto_resize on (`settings`, the run's), else, its
/// reference keeping its own size, `item_pixels` (the largest item's), which the plan takes as the reference's.
int64_t reference_pixels_bound(const std::string& pipeline_class, const nlohmann::json& settings, int64_t item_pixels);

/// What a LoRA file holds, from its header: the elements of its tensors, and of the weights its factors touch (a
/// down factor, "lora_A" / "lora_down" / ".down.", of shape [rank, in...] with its up partner [out, rank...]
/// touches out x in... elements). The plan's measure of a LoRA, not load()'s mapping: a factor without a partner
/// touches nothing here. Throws dpinfer::Error naming a file that cannot be read.
struct LoraFootprint {
  int64_t factor_elements = 0;
  int64_t touched_elements = 0;
};
LoraFootprint lora_footprint(const std::string& path);

/// Whether a `pipeline_class` model takes an item's unset width and height from a reference (FLUX.2, Qwen-Image-Edit;
/// PipelineInfo::size_from_reference), as its family row's reference_facts says, which the plan must then bound by
/// reference_pixels_bound().
bool reference_sets_item_size(const std::string& pipeline_class);

/// Plans the memory of a load of `request` under `memory` (memory_plan.h): reads the model's configs
/// and weight headers (inspect_model()), estimates each phase at the run's shape, sets in `request` the
/// first levers in order of cost whose estimate fits (only those `request` left at their defaults), and
/// caps the device's allocations at the budget (device_memory.h). Throws OutOfMemory (exit 4) when no
/// choice fits, InputError when the model cannot be read.
MemoryPlanChoice plan_memory(LoadRequest& request, const MemoryRequest& memory);


/// "12.30 GB", or "512.0 MB" below 1 GB (10^9 and 10^6 bytes, as the rest of dpinfer's memory figures).
std::string gigabytes(double bytes);

}  // namespace dpinfer::pipeline

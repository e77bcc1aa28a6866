#include "dpinfer/pipeline/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/device_memory.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

// The activation coefficients (memory_plan.h): a phase's peak working memory over the size of the tensors it
// scales with. Measured with the counting allocator (device_memory.h) on the CPU in bf16, as the slope between
// two image sizes of each phase's peak less its weights (tools/bench/memory_plan.sh; docs/memory.md, "How the
// plan estimates"), then rounded up:
// - a DiT block per token: 24.2 widths on the FLUX.1-dev shape (768 and 1536 tokens), for its input, q, k, v,
//   the attention's output, the MLP's 4x hidden state and its activation at once;
constexpr double kTransformerWidths = 26;
// - a UNet per latent pixel and row (both CFG sides): 15.9 x block_out_channels[0] on the SD 1.5 shape in fp32
//   (32^2 and 64^2 latents), over a fixed 97 MB (time and text embeddings, the deep levels' attention);
constexpr double kUNetChannels = 16;
constexpr double kUNetFixedBytes = 100e6;
// - an AutoencoderKL decoder per pixel: 9.5 x block_out_channels[0] on FLUX.1's VAE in bf16 and 9.0 on SD 1.5's
//   in fp32 (256^2 and 512^2), a full-resolution resnet beside the upsampled level before it;
constexpr double kVaeChannels = 9.5;
// - the Qwen-Image VAE's causal decoder keeps each level's last frames for its causal padding: not measured
//   here (no Qwen-Image shape fits this machine's disk and memory beside the builds), so twice the above;
constexpr double kQwenVaeChannels = 20;
// - a text encoder per token of the batch's prompts: 61 widths for T5-XXL at 512 tokens, whose 64 heads' fp32
//   position bias and scores (64 x 512 x 512 each) beside its gated 10240-wide feed-forward outweigh the width.
constexpr double kTextEncoderWidths = 64;
// - a vision tower per patch of the batch's references (Qwen-Image-Edit's Qwen2.5-VL tower, whose patches are read
//   as image tokens by the text path after its 2x2 merger): 45.7 widths of its hidden size in bf16 on the real
//   shape's 1036^2 image (5,476 patches; tools/bench/vision_tower_memory.sh, 0.64 GB above its weights), windowed
//   and full attention over the patches beside its SwiGLU's 3420-wide hidden state. It runs before the text path,
//   so the encode phase holds the larger of the two.
constexpr double kVisionTowerWidths = 48;

int64_t int_fact(const nlohmann::ordered_json& facts, const char* key, int64_t fallback) {
  auto it = facts.find(key);
  if (it == facts.end()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_array() && !it->empty() && it->front().is_number_integer()) return it->front().get<int64_t>();
  return fallback;
}

int64_t dtype_bytes(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

/// The pixels of one VAE tile (the facts' "tile_sample_size", a side in pixels), or 0 for a VAE that does not tile.
int64_t tile_pixels(const nlohmann::ordered_json& facts) {
  const int64_t side = int_fact(facts, "tile_sample_size", 0);
  return side * side;
}

/// Whether the family runs classifier-free guidance as one denoiser call on [uncond; cond] rows (the
/// UNet pipelines, SD3 and Z-Image concatenate; FLUX.1, Chroma, Qwen-Image and FLUX.2 call twice).
bool cfg_in_one_call(const std::string& denoiser_class) {
  return denoiser_class == "UNet2DConditionModel" || denoiser_class == "SD3Transformer2DModel" ||
         denoiser_class == "ZImageTransformer2DModel";
}

const char* const kResidencies[] = {"resident", "two-phase", "model", "blocks"};

}  // namespace

std::string gigabytes(double bytes) {
  return bytes < 1e9 ? fmt::format("{:.1f} MB", bytes / 1e6) : fmt::format("{:.2f} GB", bytes / 1e9);
}

std::string MemoryLevers::describe() const {
  std::vector<std::string> parts;
  if (two_phase) parts.push_back(encode_chunk > 0 ? "two-phase encoding in chunks of " + std::to_string(encode_chunk) + " items"
                                                  : "two-phase encoding");
  if (offload == "model") parts.push_back("--offload model");
  if (offload == "blocks") parts.push_back("--offload blocks:" + std::to_string(blocks_per_group));
  if (vae_tiling) parts.push_back("--vae-tiling");
  if (weight_storage != "default") parts.push_back("--weight-storage " + weight_storage);
  if (parts.empty()) return "everything resident";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

nlohmann::ordered_json MemoryLevers::to_json() const {
  return {{"two_phase", two_phase},
          {"encode_chunk", encode_chunk},
          {"offload", offload == "blocks" ? "blocks:" + std::to_string(blocks_per_group) : offload},
          {"vae_tiling", vae_tiling},
          {"weight_storage", weight_storage}};
}

double MemoryEstimate::peak() const { return std::max({encode.total(), denoise.total(), decode.total()}); }

std::string MemoryEstimate::peak_phase() const {
  const PhaseBytes& p = peak_phase_bytes();
  return &p == &denoise ? "denoise" : &p == &decode ? "decode" : "encode";
}

const PhaseBytes& MemoryEstimate::peak_phase_bytes() const {
  if (denoise.total() >= encode.total() && denoise.total() >= decode.total()) return denoise;
  return decode.total() >= encode.total() ? decode : encode;
}

nlohmann::ordered_json MemoryEstimate::to_json() const {
  auto phase = [](const PhaseBytes& p) {
    return nlohmann::ordered_json{{"weights_bytes", std::llround(p.weights)},
                                  {"activations_bytes", std::llround(p.activations)}};
  };
  return {{"levers", levers.to_json()},
          {"peak_bytes", std::llround(peak())},
          {"peak_phase", peak_phase()},
          {"encode", phase(encode)},
          {"denoise", phase(denoise)},
          {"decode", phase(decode)}};
}

MemoryPlanner::MemoryPlanner(const InspectReport& report, MemoryShape shape) : shape_(std::move(shape)) {
  for (const ComponentReport& r : report.models) {
    if (r.module_elements == 0) throw Error("the memory plan needs every component's config: " + r.name + " did not build");
    ComponentFootprint c;
    c.name = r.name;
    c.class_name = r.class_name;
    const ModelClass* model_class = find_model_class(r.class_name);
    c.role = model_class ? model_class->role : ComponentRole::kVae;
    c.elements = r.module_elements;
    c.stored_elements = r.stored_elements;
    c.block_elements = r.block_elements;
    c.block_stored_elements = r.block_stored_elements;
    c.largest_block_elements = r.largest_block_elements;
    c.largest_block_stored_elements = r.largest_block_stored_elements;
    c.gguf_bytes = r.gguf_bytes;
    c.facts = r.config;
    components_.push_back(std::move(c));
  }
}

double MemoryPlanner::weight_bytes(const ComponentFootprint& c, const std::string& storage) const {
  if (c.gguf_bytes > 0) return static_cast<double>(c.gguf_bytes);
  const double size = static_cast<double>(dtype_bytes(shape_.dtype));
  const bool stored = (storage == "fp8" && (c.role == ComponentRole::kDenoiser || c.role == ComponentRole::kTextEncoder)) ||
                      (storage == "fp8-denoiser" && c.role == ComponentRole::kDenoiser);
  if (!stored) return static_cast<double>(c.elements) * size;
  return static_cast<double>(c.elements - c.stored_elements) * size + static_cast<double>(c.stored_elements);
}

MemoryEstimate MemoryPlanner::estimate(const MemoryLevers& levers) const {
  const double size = static_cast<double>(dtype_bytes(shape_.dtype));
  const double pixels = static_cast<double>(shape_.width) * static_cast<double>(shape_.height);
  const double batch = static_cast<double>(shape_.batch_size);

  double text_weights = 0, denoiser_weights = 0, vae_weights = 0;
  double text_activations = 0, encodings_per_item = 0, denoiser_activations = 0, decode_activations = 0;
  double denoiser_outside_blocks = 0, largest_block = 0;
  double vae_scale = 8;
  for (const ComponentFootprint& c : components_)
    if (c.role == ComponentRole::kVae) vae_scale = static_cast<double>(int_fact(c.facts, "scale_factor", 8));
  const bool any_cfg_in_one_call = std::any_of(components_.begin(), components_.end(), [](const ComponentFootprint& c) {
    return c.role == ComponentRole::kDenoiser && cfg_in_one_call(c.class_name);
  });
  const double rows = batch * (shape_.guidance && any_cfg_in_one_call ? 2 : 1);
  const double sides = shape_.guidance ? 2 : 1;  // encodings per item: the prompt and the negative

  // A vision tower (a derived component: Qwen-Image-Edit's) reads each reference in patches of patch_size^2 pixels
  // and gives the text path one token per spatial_merge_size^2 of them, beside the prompt's.
  double vision_patches = 0, image_tokens = 0;
  for (const ComponentFootprint& c : components_)
    if (c.class_name == kQwen2_5_VLVisionClass && shape_.reference_pixels > 0) {
      const double patch = static_cast<double>(int_fact(c.facts, "patch_size", 14));
      const double merge = static_cast<double>(int_fact(c.facts, "spatial_merge_size", 2));
      vision_patches = static_cast<double>(shape_.reference_pixels) / (patch * patch);
      image_tokens = vision_patches / (merge * merge);
    }
  double vision_activations = 0;

  double text_outside_blocks = 0, text_largest_block = 0;
  for (const ComponentFootprint& c : components_) {
    const double w = weight_bytes(c, levers.weight_storage);
    // The bytes outside the component's offloadable blocks and of its largest block (--offload blocks), under this
    // storage; a GGUF file's in proportion to their elements. No blocks: all of it outside.
    std::pair<double, double> outside_and_largest{w, 0};
    if (c.largest_block_elements > 0) {
      const auto share = [&](int64_t elements) { return w * static_cast<double>(elements) / static_cast<double>(c.elements); };
      ComponentFootprint blocks = c, largest = c;
      blocks.elements = c.block_elements;
      blocks.stored_elements = c.block_stored_elements;
      largest.elements = c.largest_block_elements;
      largest.stored_elements = c.largest_block_stored_elements;
      const double blocks_bytes = c.gguf_bytes > 0 ? share(c.block_elements) : weight_bytes(blocks, levers.weight_storage);
      const double largest_bytes =
          c.gguf_bytes > 0 ? share(c.largest_block_elements) : weight_bytes(largest, levers.weight_storage);
      outside_and_largest = {w - blocks_bytes, largest_bytes};
    }
    if (c.role == ComponentRole::kTextEncoder && c.class_name == kQwen2_5_VLVisionClass) {
      text_weights += w;
      text_outside_blocks += outside_and_largest.first;
      text_largest_block = std::max(text_largest_block, outside_and_largest.second);
      const double width = static_cast<double>(int_fact(c.facts, "hidden_size", 0));
      vision_activations = kVisionTowerWidths * batch * vision_patches * width * size;
    } else if (c.role == ComponentRole::kTextEncoder) {
      text_weights += w;
      text_outside_blocks += outside_and_largest.first;
      text_largest_block = std::max(text_largest_block, outside_and_largest.second);
      const double width = static_cast<double>(int_fact(c.facts, "hidden_size", int_fact(c.facts, "d_model", 0)));
      const double tokens = static_cast<double>(int_fact(c.facts, "max_position_embeddings", shape_.text_tokens));
      const double seq = std::min(tokens, static_cast<double>(shape_.text_tokens) + image_tokens);
      text_activations = std::max(text_activations, kTextEncoderWidths * batch * seq * width * size);
      encodings_per_item += sides * seq * width * size;
    } else if (c.role == ComponentRole::kDenoiser) {
      denoiser_weights += w;
      denoiser_outside_blocks += outside_and_largest.first;
      largest_block = std::max(largest_block, outside_and_largest.second);
      if (c.class_name == "UNet2DConditionModel") {
        const double channels = static_cast<double>(int_fact(c.facts, "block_out_channels", 320));
        denoiser_activations =
            kUNetFixedBytes + kUNetChannels * rows * pixels / (vae_scale * vae_scale) * channels * size;
      } else {
        const double width = static_cast<double>(int_fact(c.facts, "inner_dim", int_fact(c.facts, "dim", 0)));
        double patch = 2;  // FLUX.1, Chroma, Qwen-Image and FLUX.2 pack 2x2 latents into a token
        if (c.class_name == "SD3Transformer2DModel") patch = static_cast<double>(int_fact(c.facts, "patch_size", 2));
        if (c.class_name == "ZImageTransformer2DModel") patch = static_cast<double>(int_fact(c.facts, "all_patch_size", 2));
        // A reference's tokens (FLUX.1 Kontext, FLUX.2) follow the image's in the sequence.
        const double tokens = (pixels + static_cast<double>(shape_.reference_pixels)) / (vae_scale * vae_scale * patch * patch) +
                              static_cast<double>(shape_.text_tokens);
        denoiser_activations = kTransformerWidths * rows * tokens * width * size;
      }
    } else if (c.role == ComponentRole::kVae) {
      vae_weights += w;
      // diffusers decodes an AutoencoderKL with force_upcast in float32 under fp16.
      const bool upcast = shape_.dtype == "fp16" && c.facts.value("force_upcast", false);
      const double vae_size = upcast ? 4 : size;
      const double channels = static_cast<double>(int_fact(c.facts, "block_out_channels", int_fact(c.facts, "base_dim", 128)));
      const double tile = static_cast<double>(tile_pixels(c.facts));
      const double per_channel = c.class_name == "AutoencoderKLQwenImage" ? kQwenVaeChannels : kVaeChannels;
      if (levers.vae_tiling && tile > 0 && tile < pixels) {
        // One tile decodes at a time (vae_tiling.h); the decoded tiles and the blended image (3 channels, in the
        // VAE's dtype) wait at full size beside it.
        decode_activations = per_channel * batch * tile * channels * vae_size + 2 * batch * pixels * 3 * vae_size;
      } else {
        decode_activations = per_channel * batch * pixels * channels * vae_size;
      }
    }
  }

  // Two-phase's chunk of encodings waits in host memory (LoraPipeline), which is the device only on the CPU.
  const double chunk = static_cast<double>(levers.encode_chunk > 0 ? levers.encode_chunk : shape_.encode_chunk);
  const double held = levers.two_phase && !shape_.cuda ? encodings_per_item * std::max(chunk, batch)
                                                       : encodings_per_item * batch;
  MemoryEstimate e;
  e.levers = levers;
  e.encode.activations = std::max(text_activations, vision_activations) + held;
  e.denoise.activations = denoiser_activations + held;
  e.decode.activations = decode_activations + held;
  const bool blocks = levers.offload == "blocks" && largest_block > 0;
  const double denoiser_on_device =
      blocks ? denoiser_outside_blocks + 2 * largest_block * levers.blocks_per_group : denoiser_weights;
  // The text encoders' layers (T5, the Qwen decoders) too, the encoders running one at a time.
  const bool text_blocks = blocks && text_largest_block > 0;
  const double text_on_device =
      text_blocks ? text_outside_blocks + 2 * text_largest_block * levers.blocks_per_group : text_weights;
  if (levers.offload == "model") {
    // One group on the device at a time (component_residency.h).
    e.encode.weights = text_weights;
    e.denoise.weights = denoiser_weights;
    e.decode.weights = vae_weights;
  } else if (levers.two_phase) {
    // The text encoders and the denoiser take turns; the VAE leaves with the denoiser (component_residency.h).
    e.encode.weights = text_on_device;
    e.denoise.weights = denoiser_on_device + vae_weights;
    e.decode.weights = denoiser_on_device + vae_weights;
  } else {
    const double all = text_on_device + denoiser_on_device + vae_weights;
    e.encode.weights = all;
    e.denoise.weights = all;
    e.decode.weights = all;
    if (text_blocks) {  // the encoders' groups are dropped once they ran
      e.denoise.weights -= 2 * text_largest_block * levers.blocks_per_group;
      e.decode.weights -= 2 * text_largest_block * levers.blocks_per_group;
    }
  }
  if (blocks) e.decode.weights -= 2 * largest_block * levers.blocks_per_group;  // dropped after the last group
  // LoRAs (loading/lora.h), in the run dtype, through every phase (the plan does not split them by component): on
  // a GPU only an unfused component's factors (stored weights: fp8, a GGUF file) are on the device; on the CPU the
  // host is the device, where the merged factors and the touched weights' originals wait too.
  const bool stored = levers.weight_storage != "default" || has_gguf_component();
  double lora = 0;
  if (!shape_.cuda)
    lora = static_cast<double>(shape_.lora_factor_elements + shape_.lora_touched_elements) * size;
  else if (stored)
    lora = static_cast<double>(shape_.lora_factor_elements) * size;
  e.encode.weights += lora;
  e.denoise.weights += lora;
  e.decode.weights += lora;
  return e;
}

bool MemoryPlanner::has_gguf_component() const {
  return std::any_of(components_.begin(), components_.end(), [](const ComponentFootprint& c) { return c.gguf_bytes > 0; });
}

std::vector<MemoryLevers> MemoryPlanner::candidates(const Fixed& fixed, bool exact) const {
  const bool has_blocks = std::any_of(components_.begin(), components_.end(), [](const ComponentFootprint& c) {
    return c.role == ComponentRole::kDenoiser && c.largest_block_elements > 0 && c.class_name != "UNet2DConditionModel";
  });
  const bool gguf = has_gguf_component();
  std::vector<std::string> storages = {"default"};
  if (!gguf) storages = {"default", "fp8-denoiser", "fp8"};
  if (fixed.weight_storage) storages = {*fixed.weight_storage};
  std::vector<MemoryLevers> out;
  for (const std::string& storage : storages)
    for (bool tiling : {false, true}) {
      if (fixed.vae_tiling && *fixed.vae_tiling != tiling) continue;
      for (const char* residency : kResidencies) {
        MemoryLevers l;
        l.weight_storage = storage;
        l.vae_tiling = tiling;
        const std::string r = residency;
        l.two_phase = r == "two-phase" || r == "blocks";
        l.offload = r == "model" || r == "blocks" ? r : "none";
        l.blocks_per_group = fixed.blocks_per_group;
        if ((r == "model" || r == "blocks") && !shape_.cuda) continue;  // on the CPU offload saves nothing
        if (r == "blocks" && !has_blocks) continue;
        if (fixed.offload && *fixed.offload != l.offload) continue;
        if (fixed.two_phase && *fixed.two_phase && !l.two_phase) {
          if (l.offload != "model") continue;  // two-phase asked for: keep it under model offload too
          l.two_phase = true;
        }
        if (exact && l.changes_pixels() && !(fixed.vae_tiling.value_or(false) || fixed.weight_storage)) continue;
        std::vector<MemoryLevers> variants = {l};
        // On the CPU the chunk's encodings are on the device: a chunk of one batch holds the fewest.
        if (r == "two-phase" && !shape_.cuda && !fixed.two_phase && shape_.batch_size < shape_.encode_chunk) {
          MemoryLevers small = l;
          small.encode_chunk = shape_.batch_size;
          variants.push_back(small);
        }
        for (const MemoryLevers& v : variants)
          if (std::find_if(out.begin(), out.end(), [&](const MemoryLevers& o) {
                return o.to_json() == v.to_json();
              }) == out.end())
            out.push_back(v);
      }
    }
  // Tiling that would not cut the decode (an image within one tile) is no choice: keep the untiled twin.
  std::vector<MemoryLevers> useful;
  for (const MemoryLevers& l : out) {
    if (l.vae_tiling && !(fixed.vae_tiling && *fixed.vae_tiling)) {
      MemoryLevers untiled = l;
      untiled.vae_tiling = false;
      if (estimate(l).decode.activations >= estimate(untiled).decode.activations) continue;
    }
    useful.push_back(l);
  }
  return useful;
}

MemoryEstimate MemoryPlanner::choose(double budget, const Fixed& fixed, bool exact) const {
  const std::vector<MemoryLevers> tried = candidates(fixed, exact);
  if (tried.empty()) throw Error("the memory plan has no choice to try");
  std::optional<MemoryEstimate> smallest;
  for (const MemoryLevers& l : tried) {
    MemoryEstimate e = estimate(l);
    if (e.peak() <= budget) return e;
    if (!smallest || e.peak() < smallest->peak()) smallest = e;
  }
  std::string hint = "lower --batch-size or the image size, or give more memory";
  if (exact) {
    const std::vector<MemoryLevers> all = candidates(fixed, false);
    for (const MemoryLevers& l : all)
      if (estimate(l).peak() <= budget) {
        hint = "without --exact, " + l.describe() + " would fit (" + gigabytes(estimate(l).peak()) +
               ") but changes the pixels";
        break;
      }
  }
  throw OutOfMemory(fmt::format(
      "--max-device-memory {}: the run does not fit; the smallest plan, {}, needs {} in its {} phase ({} of weights, "
      "{} of activations at {}x{}, batch {}); {}",
      gigabytes(budget), smallest->levers.describe(), gigabytes(smallest->peak()), smallest->peak_phase(),
      gigabytes(smallest->peak_phase_bytes().weights), gigabytes(smallest->peak_phase_bytes().activations),
      shape_.width, shape_.height, shape_.batch_size, hint));
}

std::optional<MemoryLevers> MemoryPlanner::next_after(const MemoryLevers& chosen, const Fixed& fixed, bool exact) const {
  const std::vector<MemoryLevers> all = candidates(fixed, exact);
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].to_json() == chosen.to_json()) {
      // The next one that needs less at its peak.
      const double peak = estimate(chosen).peak();
      for (size_t j = i + 1; j < all.size(); ++j)
        if (estimate(all[j]).peak() < peak) return all[j];
      return std::nullopt;
    }
  return std::nullopt;
}

}  // namespace dpinfer::pipeline

namespace dpinfer::pipeline {

std::string memory_plan_text(const InspectReport& report, const MemoryShape& shape, std::optional<double> budget,
                             bool exact) {
  const MemoryPlanner planner(report, shape);
  std::string out = fmt::format(
      "\nmemory plan at {}x{}, batch {}, {} on {} (estimates: weights counted, activations from measured "
      "coefficients; docs/memory.md):\n",
      shape.width, shape.height, shape.batch_size, shape.dtype, shape.cuda ? "a CUDA device" : "the CPU");
  out += fmt::format("  {:<72} {:>10} {:>10} {:>10} {:>10}\n", "", "encode", "denoise", "decode", "peak");
  for (const MemoryLevers& l : planner.candidates({}, exact)) {
    const MemoryEstimate e = planner.estimate(l);
    out += fmt::format("  {:<72} {:>10} {:>10} {:>10} {:>10}\n", l.describe() + (l.changes_pixels() ? " *" : ""),
                       gigabytes(e.encode.total()), gigabytes(e.denoise.total()), gigabytes(e.decode.total()),
                       gigabytes(e.peak()));
  }
  out += "  (* changes the pixels)\n";
  if (budget) {
    try {
      const MemoryEstimate chosen = planner.choose(*budget, {}, exact);
      out += fmt::format("with --max-device-memory {}: {} (peak {} in the {} phase)\n", gigabytes(*budget),
                         chosen.levers.describe(), gigabytes(chosen.peak()), chosen.peak_phase());
    } catch (const OutOfMemory& e) {
      out += std::string("with ") + e.what() + "\n";
    }
  }
  return out;
}

}  // namespace dpinfer::pipeline

// ---- The seam (load.h) ----

namespace dpinfer::pipeline {
namespace {

/// "auto"'s margin under the free memory: the CUDA context's later growth (cuBLAS and cuDNN workspaces,
/// NCCL's buffers) and the caching allocator's fragmentation, as a share of the free bytes and at least
/// 1 GiB on a GPU; on the CPU, what the rest of the process and the system keep.
double auto_budget(double free_bytes, bool cuda) {
  const double margin = std::max(cuda ? 1.0 * (1 << 30) : 2.0 * (1 << 30), 0.1 * free_bytes);
  return free_bytes - margin;
}

}  // namespace

int64_t reference_pixels_bound(const std::string& pipeline_class, const nlohmann::json& settings, int64_t item_pixels) {
  return class_reference_facts(pipeline_class, settings, item_pixels).max_pixels;
}

LoraFootprint lora_footprint(const std::string& path) {
  const auto file = io::SafetensorsFile::open(path);
  LoraFootprint out;
  static const std::pair<const char*, const char*> kPairs[] = {{"lora_A", "lora_B"}, {"lora_down", "lora_up"},
                                                               {".down.", ".up."}};
  for (const io::TensorView& t : file->tensors()) {
    out.factor_elements += t.numel();
    if (t.shape.empty() || t.shape[0] <= 0) continue;
    for (const auto& [down, up] : kPairs) {
      const size_t at = t.name.find(down);
      if (at == std::string::npos) continue;
      const io::TensorView* partner = file->find(t.name.substr(0, at) + up + t.name.substr(at + std::strlen(down)));
      if (partner && !partner->shape.empty()) out.touched_elements += partner->shape[0] * (t.numel() / t.shape[0]);
      break;
    }
  }
  return out;
}

bool reference_sets_item_size(const std::string& pipeline_class) {
  return class_reference_facts(pipeline_class).sets_item_size;
}

MemoryPlanChoice plan_memory(LoadRequest& request, const MemoryRequest& memory) {
  SingleFileOptions single_file{request.base, request.text_encoder, request.text_encoder_2, request.vae};
  const InspectReport report = inspect_model(request.model, request.variant, request.scheduler, single_file, {},
                                             request.scheduler_settings);
  if (!report.ok()) throw InputError(report.error);
  MemoryShape shape;
  shape.width = memory.width > 0 ? memory.width : (report.default_size ? (*report.default_size)[1] : 1024);
  shape.height = memory.height > 0 ? memory.height : (report.default_size ? (*report.default_size)[0] : 1024);
  shape.batch_size = memory.batch_size;
  shape.dtype = request.dtype;
  shape.cuda = request.device != "cpu";
  shape.guidance = memory.guidance;
  shape.encode_chunk = memory.encode_chunk;
  if (request.settings.contains("max_sequence_length") && request.settings["max_sequence_length"].is_number_integer())
    shape.text_tokens = request.settings["max_sequence_length"].get<int64_t>();
  if (memory.sizes_from_references && reference_sets_item_size(report.pipeline)) {
    // An image as large as its reference may be: the plan's size has at least those pixels (a square of them).
    const int64_t bound = reference_pixels_bound(report.pipeline, request.settings, 0);
    if (shape.width * shape.height < bound) {
      shape.width = static_cast<int64_t>(std::sqrt(static_cast<double>(bound)));
      shape.height = (bound + shape.width - 1) / shape.width;
    }
  }
  for (const io::LoraSet& set : memory.lora_sets) {
    LoraFootprint sum;
    for (const io::LoraRef& ref : set) {
      const LoraFootprint f = lora_footprint(ref.path);
      sum.factor_elements += f.factor_elements;
      sum.touched_elements += f.touched_elements;
    }
    shape.lora_factor_elements = std::max(shape.lora_factor_elements, sum.factor_elements);
    shape.lora_touched_elements = std::max(shape.lora_touched_elements, sum.touched_elements);
  }
  if (memory.reference_images > 0)
    shape.reference_pixels =
        memory.reference_images * reference_pixels_bound(report.pipeline, request.settings, shape.width * shape.height);
  const MemoryPlanner planner(report, shape);

  MemoryPlanner::Fixed fixed;
  if (request.weight_storage != "default") fixed.weight_storage = request.weight_storage;
  // --fp8-compute keeps the denoiser's block weights in float8 (one byte each), as fp8-denoiser storage keeps
  // them and a little more (its embedders too): the plan counts it so and chooses no storage of its own.
  const bool fp8_compute = request.fp8_compute != "off";
  if (fp8_compute) fixed.weight_storage = "fp8-denoiser";
  if (request.offload != "none") fixed.offload = request.offload;
  if (request.cuda_graphs) fixed.offload = "none";  // a graph holds the weights' addresses (nn/cuda_graphs.h)
  fixed.blocks_per_group = request.offload_blocks_per_group;
  if (request.vae_tiling) fixed.vae_tiling = true;
  if (request.two_phase) fixed.two_phase = true;

  double budget = memory.budget;
  if (budget <= 0) {
    const std::optional<int64_t> free = DeviceMemory::free_bytes(request.device);
    if (!free)
      throw Error("--max-device-memory auto: cannot read the free memory of " + request.device +
                  "; give a number of GB");
    budget = auto_budget(static_cast<double>(*free), shape.cuda);
    if (budget <= 0)
      throw OutOfMemory("--max-device-memory auto: " + request.device + " has " +
                        gigabytes(static_cast<double>(*free)) + " free, no more than its margin; free the device or "
                        "give a number of GB");
  }
  MemoryEstimate chosen = planner.choose(budget, fixed, memory.exact);
  const std::optional<MemoryLevers> next = planner.next_after(chosen.levers, fixed, memory.exact);
  if (fp8_compute) chosen.levers.weight_storage = "default";  // the float8 is --fp8-compute's, not a storage
  request.two_phase = chosen.levers.two_phase;
  request.offload = chosen.levers.offload;
  request.offload_blocks_per_group = chosen.levers.blocks_per_group;
  request.vae_tiling = chosen.levers.vae_tiling;
  request.weight_storage = chosen.levers.weight_storage;
  DeviceMemory::cap(request.device, static_cast<int64_t>(budget));

  MemoryPlanChoice out;
  out.budget = budget;
  out.choice = fmt::format("{}{}; estimated peak {} in the {} phase, within --max-device-memory {}",
                           chosen.levers.describe(), fp8_compute ? ", --fp8-compute " + request.fp8_compute : "",
                           gigabytes(chosen.peak()), chosen.peak_phase(), gigabytes(budget));
  std::string references =
      shape.reference_pixels > 0 ? fmt::format(", references up to {} pixels", shape.reference_pixels) : "";
  if (shape.lora_factor_elements > 0)
    references += fmt::format(", LoRAs of up to {} factor values touching {} weight values", shape.lora_factor_elements,
                              shape.lora_touched_elements);
  out.summary = fmt::format("memory plan for {} at {}x{}, batch {}{}: {}", request.device, shape.width, shape.height,
                            shape.batch_size, references, out.choice);
  if (next) out.next = next->describe();
  out.record = chosen.to_json();
  out.record["budget_bytes"] = std::llround(budget);
  out.record["exact"] = memory.exact;
  out.record["shape"] = {{"width", shape.width}, {"height", shape.height}, {"batch_size", shape.batch_size},
                         {"dtype", shape.dtype}};
  if (shape.reference_pixels > 0) out.record["shape"]["reference_pixels"] = shape.reference_pixels;
  if (shape.lora_factor_elements > 0) {
    out.record["shape"]["lora_factor_elements"] = shape.lora_factor_elements;
    out.record["shape"]["lora_touched_elements"] = shape.lora_touched_elements;
  }
  return out;
}

}  // namespace dpinfer::pipeline

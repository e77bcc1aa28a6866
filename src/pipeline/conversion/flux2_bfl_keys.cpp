// Ref: diffusers 0.37.0 loaders/single_file_utils.py convert_flux2_transformer_checkpoint_to_diffusers
// (FLUX2_TRANSFORMER_KEYS_RENAME_DICT, _ADA_LAYER_NORM_KEY_MAP, _DOUBLE_BLOCK_KEY_MAP, _SINGLE_BLOCK_KEY_MAP).
#include "dpinfer/pipeline/conversion/flux2_bfl_keys.h"

#include <algorithm>
#include <optional>

#include "dpinfer/pipeline/conversion/bfl_block_keys.h"
#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using bfl_block_keys::append_double_block;
using bfl_block_keys::append_single_block;
using key_rules::append_swapped_halves;
using key_rules::indexed;
using key_rules::leaf_of;
using key_rules::rename;
using key_rules::Renames;
using key_rules::whole;

// BFL's flux2 model's own layers -> Flux2Transformer2DModel. FLUX.2 has no biases; the modulations are shared by
// every block of a stream kind ("lin" -> "linear").
const Renames kFlux2Top{{"time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"},
                        {"time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"},
                        {"guidance_in.in_layer", "time_guidance_embed.guidance_embedder.linear_1"},
                        {"guidance_in.out_layer", "time_guidance_embed.guidance_embedder.linear_2"},
                        {"double_stream_modulation_img.lin", "double_stream_modulation_img.linear"},
                        {"double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"},
                        {"single_stream_modulation.lin", "single_stream_modulation.linear"},
                        {"txt_in", "context_embedder"},
                        {"img_in", "x_embedder"},
                        {"final_layer.linear", "proj_out"}};

// A double block (transformer_blocks.N): attention outputs and the SwiGLU feed-forwards' in / out projections.
const Renames kFlux2Double{{"img_attn.proj", "attn.to_out.0"},
                           {"txt_attn.proj", "attn.to_add_out"},
                           {"img_mlp.0", "ff.linear_in"},
                           {"img_mlp.2", "ff.linear_out"},
                           {"txt_mlp.0", "ff_context.linear_in"},
                           {"txt_mlp.2", "ff_context.linear_out"}};

// A single block (single_transformer_blocks.N): linear1 (q, k, v and the MLP's input, fused in diffusers too) and
// linear2.
const Renames kFlux2Single{{"linear1", "attn.to_qkv_mlp_proj"}, {"linear2", "attn.to_out"}};

}  // namespace

Flux2BflShape flux2_bfl_shape(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  Flux2BflShape s;
  for (const SourceTensor& t : tensors) {
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    if (auto d = indexed(key, "double_blocks.")) s.double_blocks = std::max(s.double_blocks, d->first + 1);
    if (auto b = indexed(key, "single_blocks.")) s.single_blocks = std::max(s.single_blocks, b->first + 1);
    if (starts_with(key, "guidance_in.")) s.guidance = true;
    if (key == "img_in.weight" && t.shape.size() == 2) s.in_channels = t.shape[1];
    if (key == "txt_in.weight" && t.shape.size() == 2) s.joint_attention_dim = t.shape[1];
  }
  return s;
}

std::vector<TensorPart> convert_flux2_bfl_keys(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  std::vector<TensorPart> parts;
  for (size_t s = 0; s < tensors.size(); ++s) {
    const SourceTensor& t = tensors[s];
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    if (const std::string leaf = leaf_of(key, "final_layer.adaLN_modulation.1"); !leaf.empty()) {
      // The last layer's modulation gives (shift, scale); diffusers' AdaLayerNormContinuous reads (scale, shift).
      append_swapped_halves(parts, s, t, "norm_out.linear." + leaf);
      continue;
    }
    if (auto top = rename(key, kFlux2Top)) {
      parts.push_back(whole(s, *top, t.shape));
      continue;
    }
    if (auto block = indexed(key, "double_blocks.")) {
      append_double_block(parts, s, t, key, block->first, block->second, kFlux2Double);
      continue;
    }
    if (auto block = indexed(key, "single_blocks.")) {
      append_single_block(parts, s, t, key, block->first, block->second, kFlux2Single);
      continue;
    }
    parts.push_back(whole(s, key, t.shape));
  }
  return parts;
}

}  // namespace dpinfer::pipeline

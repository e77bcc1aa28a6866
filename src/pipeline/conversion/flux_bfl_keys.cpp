#include "dpinfer/pipeline/conversion/flux_bfl_keys.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "dpinfer/pipeline/conversion/bfl_block_keys.h"
#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/error.h"
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
using key_rules::row_range;
using key_rules::whole;

// ---- The tables: BFL module path -> diffusers module path (diffusers 0.36.0,
// loaders/single_file_utils.py convert_flux_transformer_checkpoint_to_diffusers). An entry
// renames the module path the rest of the key starts with; the QK norms are whole keys,
// since BFL's RMSNorm calls its weight "scale".

// flux/model.py Flux's own layers -> FluxTransformer2DModel.
const Renames kFluxBflTop{{"time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"},
                   {"time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"},
                   {"vector_in.in_layer", "time_text_embed.text_embedder.linear_1"},
                   {"vector_in.out_layer", "time_text_embed.text_embedder.linear_2"},
                   {"guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"},
                   {"guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"},
                   {"txt_in", "context_embedder"},
                   {"img_in", "x_embedder"},
                   {"final_layer.linear", "proj_out"}};

// DoubleStreamBlock -> FluxTransformerBlock (transformer_blocks.N).
const Renames kDouble{{"img_mod.lin", "norm1.linear"},
                      {"txt_mod.lin", "norm1_context.linear"},
                      {"img_mlp.0", "ff.net.0.proj"},
                      {"img_mlp.2", "ff.net.2"},
                      {"txt_mlp.0", "ff_context.net.0.proj"},
                      {"txt_mlp.2", "ff_context.net.2"},
                      {"img_attn.proj", "attn.to_out.0"},
                      {"txt_attn.proj", "attn.to_add_out"}};

// SingleStreamBlock -> FluxSingleTransformerBlock (single_transformer_blocks.N).
const Renames kSingle{{"modulation.lin", "norm.linear"}, {"linear2", "proj_out"}};

// Chroma's distilled guidance layer (diffusers 0.36.0 convert_chroma_transformer_checkpoint_to_diffusers):
// the approximator's in_proj / out_proj keep their names; its MLP blocks' in_layer / out_layer become
// linear_1 / linear_2 (layers.N), its RMSNorms' "scale" becomes "weight" (norms.N). Chroma's files are
// FLUX.1's BFL layout otherwise, without guidance_in / time_in / vector_in and the blocks' modulations.
const Renames kApproximatorLayer{{"in_layer", "linear_1"}, {"out_layer", "linear_2"}};
constexpr const char* kApproximator = "distilled_guidance_layer.";
// A single block's linear1: q, k, v (inner_dim rows each), then proj_mlp (the rest, inner_dim * mlp_ratio).
const char* const kLinear1Thirds[] = {"attn.to_q", "attn.to_k", "attn.to_v"};

}  // namespace

FluxBflBlocks count_flux_bfl_blocks(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  FluxBflBlocks b;
  for (const SourceTensor& t : tensors) {
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    if (auto d = indexed(key, "double_blocks.")) b.double_blocks = std::max(b.double_blocks, d->first + 1);
    if (auto s = indexed(key, "single_blocks.")) b.single_blocks = std::max(b.single_blocks, s->first + 1);
    if (starts_with(key, "guidance_in.")) b.guidance = true;
    if (auto a = indexed(key, "distilled_guidance_layer.layers."))
      b.approximator_layers = std::max(b.approximator_layers, a->first + 1);
  }
  return b;
}

std::vector<TensorPart> convert_flux_bfl_keys(const std::string& prefix, int64_t inner_dim,
                                              const std::vector<SourceTensor>& tensors) {
  if (inner_dim < 1) throw InputError("the FLUX.1 transformer config's inner dimension must be at least 1");
  std::vector<TensorPart> parts;
  for (size_t s = 0; s < tensors.size(); ++s) {
    const SourceTensor& t = tensors[s];
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    const std::string where = key_rules::tensor_text(t);

    if (const std::string leaf = leaf_of(key, "final_layer.adaLN_modulation.1"); !leaf.empty()) {
      // LastLayer's adaLN_modulation gives (shift, scale); diffusers' AdaLayerNormContinuous
      // reads (scale, shift): swap_scale_shift.
      append_swapped_halves(parts, s, t, "norm_out.linear." + leaf);
      continue;
    }
    if (starts_with(key, kApproximator)) {
      const std::string rest = key.substr(std::string(kApproximator).size());
      std::optional<std::string> r;
      if (auto layer = indexed(rest, "layers.")) {
        if (auto m = rename(layer->second, kApproximatorLayer)) r = "layers." + std::to_string(layer->first) + "." + *m;
      } else if (auto norm = indexed(rest, "norms."); norm && norm->second == "scale") {
        r = "norms." + std::to_string(norm->first) + ".weight";
      }
      parts.push_back(whole(s, r ? kApproximator + *r : key, t.shape));
      continue;
    }
    if (auto top = rename(key, kFluxBflTop)) {
      parts.push_back(whole(s, *top, t.shape));
      continue;
    }
    if (auto block = indexed(key, "double_blocks.")) {
      append_double_block(parts, s, t, key, block->first, block->second, kDouble);
      continue;
    }
    if (auto block = indexed(key, "single_blocks.")) {
      const auto& [n, rest] = *block;
      const std::string base = "single_transformer_blocks." + std::to_string(n) + ".";
      if (const std::string leaf = leaf_of(rest, "linear1"); !leaf.empty()) {
        if (t.shape.empty() || t.shape[0] <= 3 * inner_dim)
          throw InputError(where + ": linear1 holds q, k and v (" + std::to_string(inner_dim) +
                           " rows each, the config's num_attention_heads * attention_head_dim) and then the MLP's "
                           "projection, so more than " + std::to_string(3 * inner_dim) +
                           " rows; the file does not belong to this config");
        for (int64_t k = 0; k < 3; ++k)
          parts.push_back(row_range(s, base + kLinear1Thirds[k] + "." + leaf, t.shape, k * inner_dim, inner_dim));
        parts.push_back(row_range(s, base + "proj_mlp." + leaf, t.shape, 3 * inner_dim, t.shape[0] - 3 * inner_dim));
        continue;
      }
      append_single_block(parts, s, t, key, n, rest, kSingle);
      continue;
    }
    parts.push_back(whole(s, key, t.shape));
  }
  return parts;
}

}  // namespace dpinfer::pipeline

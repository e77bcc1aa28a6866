#include "dpinfer/pipeline/conversion/ldm_keys.h"

#include <optional>
#include <utility>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using key_rules::indexed;
using key_rules::rename;
using key_rules::Renames;
using key_rules::whole;

// ---- The tables: LDM module path -> diffusers module path (a prefix of the rest of the key).

// ldm/modules/diffusionmodules/openaimodel.py ResBlock -> diffusers ResnetBlock2D
// (single_file_utils.py DIFFUSERS_TO_LDM_MAPPING["unet"]["resnets"]).
const Renames kUNetResnet{{"in_layers.0", "norm1"},        {"in_layers.2", "conv1"},
                          {"emb_layers.1", "time_emb_proj"}, {"out_layers.0", "norm2"},
                          {"out_layers.3", "conv2"},        {"skip_connection", "conv_shortcut"}};

// UNetModel's own layers (DIFFUSERS_TO_LDM_MAPPING["unet"]["layers"]; label_emb is SDXL's
// text_time embedding, convert_ldm_unet_checkpoint's "label_emb.0.0"/"label_emb.0.2").
const Renames kUNetTop{{"time_embed.0", "time_embedding.linear_1"}, {"time_embed.2", "time_embedding.linear_2"},
                       {"label_emb.0.0", "add_embedding.linear_1"},  {"label_emb.0.2", "add_embedding.linear_2"},
                       {"input_blocks.0.0", "conv_in"},              {"out.0", "conv_norm_out"},
                       {"out.2", "conv_out"}};

// ldm/modules/diffusionmodules/model.py ResnetBlock -> ResnetBlock2D (nin_shortcut).
const Renames kVaeResnet{{"nin_shortcut", "conv_shortcut"}};

// The VAE's mid-block AttnBlock (1x1 convs) -> diffusers Attention (linears);
// convert_ldm_vae_checkpoint's conv_attn_to_linear reshapes the weights.
const Renames kVaeAttention{{"norm", "group_norm"}, {"q", "to_q"}, {"k", "to_k"}, {"v", "to_v"},
                            {"proj_out", "to_out.0"}};

// open_clip's text tower -> transformers CLIPTextModel (DIFFUSERS_TO_LDM_MAPPING["openclip"]).
const Renames kOpenClipTop{{"token_embedding", "text_model.embeddings.token_embedding"},
                           {"ln_final", "text_model.final_layer_norm"}};
const Renames kOpenClipLayer{{"ln_1", "layer_norm1"},     {"ln_2", "layer_norm2"},  {"mlp.c_fc", "mlp.fc1"},
                             {"mlp.c_proj", "mlp.fc2"}, {"attn.out_proj", "self_attn.out_proj"}};

// ---- UNet.

std::optional<std::string> unet_key(const std::string& key, int64_t lpb) {
  if (auto top = rename(key, kUNetTop)) return top;
  const int64_t per_level = lpb + 1;  // resnets, then the down/upsampler slot
  if (auto in = indexed(key, "input_blocks.")) {
    const auto [i, rest] = *in;
    auto sub = indexed("x." + rest, "x.");  // "<J>.<rest>"
    if (i < 1 || !sub) return std::nullopt;
    const auto [j, inner] = *sub;
    const int64_t level = (i - 1) / per_level, layer = (i - 1) % per_level;
    const std::string block = "down_blocks." + std::to_string(level);
    if (layer < lpb && j == 0) {
      auto r = rename(inner, kUNetResnet);
      return r ? std::optional(block + ".resnets." + std::to_string(layer) + "." + *r) : std::nullopt;
    }
    if (layer < lpb && j == 1) return block + ".attentions." + std::to_string(layer) + "." + inner;
    if (layer == lpb && j == 0 && starts_with(inner, "op.")) return block + ".downsamplers.0.conv." + inner.substr(3);
    return std::nullopt;
  }
  if (auto mid = indexed(key, "middle_block.")) {
    const auto [i, rest] = *mid;
    if (i == 1) return "mid_block.attentions.0." + rest;
    if (i != 0 && i != 2) return std::nullopt;
    auto r = rename(rest, kUNetResnet);
    return r ? std::optional("mid_block.resnets." + std::to_string(i / 2) + "." + *r) : std::nullopt;
  }
  if (auto out = indexed(key, "output_blocks.")) {
    const auto [i, rest] = *out;
    auto sub = indexed("x." + rest, "x.");
    if (!sub) return std::nullopt;
    const auto [j, inner] = *sub;
    const std::string block = "up_blocks." + std::to_string(i / per_level);
    const int64_t layer = i % per_level;
    if (j == 0) {
      auto r = rename(inner, kUNetResnet);
      return r ? std::optional(block + ".resnets." + std::to_string(layer) + "." + *r) : std::nullopt;
    }
    // The upsampler follows the resnet (and the attention, when the level has one) of the
    // level's last layer; an attention has no "conv" of its own (convert_ldm_unet_checkpoint).
    if (starts_with(inner, "conv.")) return block + ".upsamplers.0." + inner;
    if (j == 1) return block + ".attentions." + std::to_string(layer) + "." + inner;
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- VAE.

std::optional<std::string> vae_key(const std::string& key, int64_t levels, bool* attention_weight) {
  if (starts_with(key, "quant_conv.") || starts_with(key, "post_quant_conv.")) return key;
  std::string half;
  if (starts_with(key, "encoder.")) half = "encoder";
  if (starts_with(key, "decoder.")) half = "decoder";
  if (half.empty()) return std::nullopt;
  const std::string rest = key.substr(half.size() + 1);
  if (starts_with(rest, "conv_in.") || starts_with(rest, "conv_out.")) return key;
  if (starts_with(rest, "norm_out.")) return half + ".conv_norm_out." + rest.substr(9);
  auto resnet = [](const std::string& inner) { return rename(inner, kVaeResnet).value_or(inner); };
  for (const char* dir : {"down.", "up."}) {
    auto level = indexed(rest, dir);
    if (!level) continue;
    int64_t n = level->first;
    const std::string& inner = level->second;
    const bool up = dir[0] == 'u';
    if (n >= levels) return std::nullopt;
    if (up) n = levels - 1 - n;  // ldm counts the decoder's levels from the bottom
    const std::string block = half + (up ? ".up_blocks." : ".down_blocks.") + std::to_string(n);
    if (auto res = indexed(inner, "block.")) return block + ".resnets." + std::to_string(res->first) + "." + resnet(res->second);
    if (!up && starts_with(inner, "downsample.conv.")) return block + ".downsamplers.0.conv." + inner.substr(16);
    if (up && starts_with(inner, "upsample.conv.")) return block + ".upsamplers.0.conv." + inner.substr(14);
    return std::nullopt;
  }
  if (starts_with(rest, "mid.block_1.")) return half + ".mid_block.resnets.0." + resnet(rest.substr(12));
  if (starts_with(rest, "mid.block_2.")) return half + ".mid_block.resnets.1." + resnet(rest.substr(12));
  if (starts_with(rest, "mid.attn_1.")) {
    auto r = rename(rest.substr(11), kVaeAttention);
    if (!r) return std::nullopt;
    *attention_weight = !starts_with(*r, "group_norm.") && ends_with(*r, ".weight");
    return half + ".mid_block.attentions.0." + *r;
  }
  return std::nullopt;
}

}  // namespace

const char* layout_name(CheckpointLayout layout) {
  switch (layout) {
    case CheckpointLayout::kLdmUNet: return "LDM UNet";
    case CheckpointLayout::kLdmVae: return "LDM VAE";
    case CheckpointLayout::kTransformersClip: return "transformers CLIP";
    case CheckpointLayout::kOpenClip: return "OpenCLIP";
    case CheckpointLayout::kFluxBfl: return "BFL FLUX.1";
    case CheckpointLayout::kDiffusersNames: return "diffusers names";
    case CheckpointLayout::kZImageOriginal: return "Z-Image original";
    case CheckpointLayout::kSd3Mmdit: return "SD3 MMDiT";
    case CheckpointLayout::kSd3ClipL: return "SD3 CLIP-L";
    case CheckpointLayout::kFlux2Bfl: return "BFL FLUX.2";
  }
  return "?";
}

std::vector<TensorPart> convert_ldm_keys(CheckpointLayout layout, const std::string& prefix, const LayoutShape& shape,
                                         const std::vector<SourceTensor>& tensors) {
  std::vector<TensorPart> parts;
  for (size_t s = 0; s < tensors.size(); ++s) {
    const SourceTensor& t = tensors[s];
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    const std::string where = key_rules::tensor_text(t);
    switch (layout) {
      case CheckpointLayout::kFluxBfl:
      case CheckpointLayout::kZImageOriginal:
      case CheckpointLayout::kSd3Mmdit:
      case CheckpointLayout::kFlux2Bfl:
        throw Error(std::string("convert_ldm_keys: the ") + layout_name(layout) +
                    " layout has a conversion of its own (flux_bfl_keys.h, z_image_keys.h, sd3_keys.h, "
                    "flux2_bfl_keys.h)");
      case CheckpointLayout::kDiffusersNames:
        // diffusers 0.36.0 reads a Qwen-Image file as is (single_file_model.py's mapping for
        // QwenImageTransformer2DModel is the identity); ComfyUI may save the same keys under its prefix.
        parts.push_back(whole(s, key, t.shape));
        break;
      case CheckpointLayout::kLdmUNet: {
        if (shape.unet_layers_per_block < 1)
          throw InputError("the UNet config's layers_per_block must be at least 1 for an LDM checkpoint");
        parts.push_back(whole(s, unet_key(key, shape.unet_layers_per_block).value_or(key), t.shape));
        break;
      }
      case CheckpointLayout::kLdmVae: {
        // Unpruned checkpoints keep the autoencoder's training loss (LPIPS and the
        // discriminator) under first_stage_model.loss.*; convert_ldm_vae_checkpoint skips it.
        if (starts_with(key, "loss.")) break;
        bool attention_weight = false;
        std::optional<std::string> target = vae_key(key, shape.vae_levels, &attention_weight);
        std::vector<int64_t> target_shape = t.shape;
        if (attention_weight) {
          // [C, C, 1, 1] 1x1 conv -> [C, C] linear (a view of the same bytes); [C, C] as is.
          const bool conv = t.shape.size() == 4 && t.shape[2] == 1 && t.shape[3] == 1;
          if (!conv && t.shape.size() != 2)
            throw InputError(where + ": expected a [C, C, 1, 1] or [C, C] attention projection");
          target_shape.resize(2);
        }
        parts.push_back(whole(s, target.value_or(key), target_shape));
        break;
      }
      case CheckpointLayout::kSd3ClipL:
        // diffusers replaces this text_projection by the identity (the loader fills it): the file's is not read.
        if (key == "text_projection.weight") break;
        [[fallthrough]];
      case CheckpointLayout::kTransformersClip: {
        // Checkpoints saved with transformers before 4.x's CLIPTextTransformer wrapper have no
        // "text_model." (convert_ldm_clip_checkpoint strips the prefix the same way either way).
        // CLIPTextModelWithProjection's text_projection (SD3's CLIP-G) sits beside text_model.
        const bool as_is = starts_with(key, "text_model.") || key == "text_projection.weight";
        parts.push_back(whole(s, as_is ? key : "text_model." + key, t.shape));
        break;
      }
      case CheckpointLayout::kOpenClip: {
        // The contrastive temperature, the causal mask buffer and an image tower: no text model
        // has them (convert_open_clip_checkpoint reads only the text tower's keys).
        if (key == "logit_scale" || key == "attn_mask" || starts_with(key, "visual.")) break;
        if (key == "text_projection") {
          // open_clip computes x @ text_projection, [width, proj]; transformers' Linear holds
          // [proj, width] (convert_open_clip_checkpoint transposes it). SD 2.x's
          // CLIPTextModel has none: dropped there, as diffusers drops it.
          if (!shape.text_projection) break;
          if (t.shape.size() != 2) throw InputError(where + ": expected a 2-D text_projection");
          TensorPart p = whole(s, "text_projection.weight", {t.shape[1], t.shape[0]});
          p.transpose = true;
          parts.push_back(std::move(p));
          break;
        }
        if (key == "positional_embedding") {
          parts.push_back(whole(s, "text_model.embeddings.position_embedding.weight", t.shape));
          break;
        }
        if (auto top = rename(key, kOpenClipTop)) {
          parts.push_back(whole(s, *top, t.shape));
          break;
        }
        auto layer = indexed(key, "transformer.resblocks.");
        if (!layer) {
          parts.push_back(whole(s, key, t.shape));
          break;
        }
        const auto [n, inner] = *layer;
        // SD 2.x's text encoder stops one layer short of open_clip's ViT-H (the penultimate
        // layer is its output; SD_2_TEXT_ENCODER_KEYS_TO_IGNORE drops resblocks.23).
        if (n >= shape.text_layers) break;
        const std::string base = "text_model.encoder.layers." + std::to_string(n) + ".";
        if (inner == "attn.in_proj_weight" || inner == "attn.in_proj_bias") {
          const std::string targets[3] = {base + "self_attn.q_proj", base + "self_attn.k_proj",
                                          base + "self_attn.v_proj"};
          key_rules::append_thirds(parts, s, t, targets, inner == "attn.in_proj_weight" ? "weight" : "bias");
          break;
        }
        auto r = rename(inner, kOpenClipLayer);
        parts.push_back(whole(s, r ? base + *r : key, t.shape));
        break;
      }
    }
  }
  return parts;
}

}  // namespace dpinfer::pipeline

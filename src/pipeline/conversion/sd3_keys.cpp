#include "dpinfer/pipeline/conversion/sd3_keys.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using key_rules::append_swapped_halves;
using key_rules::append_thirds;
using key_rules::exact;
using key_rules::FusedThirds;
using key_rules::indexed;
using key_rules::leaf_of;
using key_rules::rename;
using key_rules::under;
using key_rules::Renames;
using key_rules::whole;

// ---- The tables: original MMDiT (Stability AI's sd3_impls / ComfyUI's comfy/ldm/modules/diffusionmodules/
// mmdit.py) -> diffusers SD3Transformer2DModel, from diffusers 0.36.0's
// convert_sd3_transformer_checkpoint_to_diffusers. An entry renames the module path the rest of the key
// starts with.

// MMDiT's own layers.
const Renames kSd3Top{{"x_embedder.proj", "pos_embed.proj"},
                   {"t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"},
                   {"t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"},
                   {"y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"},
                   {"y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"},
                   {"context_embedder", "context_embedder"},
                   {"final_layer.linear", "proj_out"}};

// A JointBlock's x_block (the image stream) and context_block (the text stream) -> JointTransformerBlock.
const Renames kXBlock{{"attn.proj", "attn.to_out.0"},          {"attn2.proj", "attn2.to_out.0"},
                      {"adaLN_modulation.1", "norm1.linear"}, {"mlp.fc1", "ff.net.0.proj"},
                      {"mlp.fc2", "ff.net.2"}};
const Renames kContextBlock{{"attn.proj", "attn.to_add_out"},
                            {"adaLN_modulation.1", "norm1_context.linear"},
                            {"mlp.fc1", "ff_context.net.0.proj"},
                            {"mlp.fc2", "ff_context.net.2"}};
// The QK RMSNorms of SD3.5 (qk_norm "rms_norm"), whole keys.
const Renames kXNorms{{"attn.ln_q.weight", "attn.norm_q.weight"},
                      {"attn.ln_k.weight", "attn.norm_k.weight"},
                      {"attn2.ln_q.weight", "attn2.norm_q.weight"},
                      {"attn2.ln_k.weight", "attn2.norm_k.weight"}};
const Renames kContextNorms{{"attn.ln_q.weight", "attn.norm_added_q.weight"},
                            {"attn.ln_k.weight", "attn.norm_added_k.weight"}};

// The fused projections of an x block (SD3.5 medium's attn2 too) and of a context block.
const std::vector<FusedThirds> kXFused{{"attn.qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}},
                                       {"attn2.qkv", {"attn2.to_q", "attn2.to_k", "attn2.to_v"}}};
const std::vector<FusedThirds> kContextFused{
    {"attn.qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}}};

}  // namespace

Sd3Blocks count_sd3_blocks(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  Sd3Blocks b;
  b.joint_blocks = key_rules::count_blocks(prefix, "joint_blocks.", tensors);
  std::set<int64_t> dual;
  for (const SourceTensor& t : tensors) {
    const std::optional<std::string> key = under(prefix, t.name);
    if (!key) continue;
    if (*key == "pos_embed" && t.shape.size() == 3) b.pos_embed_rows = t.shape[1];
    auto block = indexed(*key, "joint_blocks.");
    if (!block) continue;
    // get_attn2_layers: the blocks with "attn2." keys; has_qk_norm: any "ln_q" key.
    if (starts_with(block->second, "x_block.attn2.")) dual.insert(block->first);
    if (block->second.find(".ln_q.") != std::string::npos) b.qk_norm = true;
  }
  b.dual_attention_layers.assign(dual.begin(), dual.end());
  return b;
}

std::vector<TensorPart> convert_sd3_keys(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  // The last joint block is context_pre_only: its context_block's modulation is an
  // AdaLayerNormContinuous's, stored (shift, scale) (the converter's i == num_layers - 1).
  const int64_t last = key_rules::count_blocks(prefix, "joint_blocks.", tensors) - 1;
  std::vector<TensorPart> parts;
  for (size_t s = 0; s < tensors.size(); ++s) {
    const SourceTensor& t = tensors[s];
    const std::optional<std::string> key = under(prefix, t.name);
    if (!key) continue;
    if (*key == "pos_embed") {
      parts.push_back(whole(s, "pos_embed.pos_embed", t.shape));
      continue;
    }
    if (const std::string leaf = leaf_of(*key, "final_layer.adaLN_modulation.1"); !leaf.empty()) {
      append_swapped_halves(parts, s, t, "norm_out.linear." + leaf);
      continue;
    }
    if (auto top = rename(*key, kSd3Top)) {
      parts.push_back(whole(s, *top, t.shape));
      continue;
    }
    auto block = indexed(*key, "joint_blocks.");
    if (!block) {
      parts.push_back(whole(s, *key, t.shape));
      continue;
    }
    const auto& [n, rest] = *block;
    const std::string base = "transformer_blocks." + std::to_string(n) + ".";
    const bool context = starts_with(rest, "context_block.");
    if (!context && !starts_with(rest, "x_block.")) {
      parts.push_back(whole(s, *key, t.shape));
      continue;
    }
    const std::string inner = rest.substr(context ? 14 : 8);  // after "context_block." / "x_block."
    bool fused = false;
    for (const FusedThirds& f : context ? kContextFused : kXFused) {
      const std::string leaf = leaf_of(inner, f.from);
      if (leaf.empty()) continue;
      const std::string targets[3] = {base + f.to[0], base + f.to[1], base + f.to[2]};
      append_thirds(parts, s, t, targets, leaf);
      fused = true;
    }
    if (fused) continue;
    if (const std::string leaf = leaf_of(inner, "adaLN_modulation.1"); context && n == last && !leaf.empty()) {
      append_swapped_halves(parts, s, t, base + "norm1_context.linear." + leaf);
      continue;
    }
    auto r = exact(inner, context ? kContextNorms : kXNorms);
    if (!r) r = rename(inner, context ? kContextBlock : kXBlock);
    parts.push_back(whole(s, r ? base + *r : *key, t.shape));
  }
  return parts;
}

}  // namespace dpinfer::pipeline

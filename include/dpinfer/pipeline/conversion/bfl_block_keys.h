#pragma once
// What FLUX.1's and FLUX.2's Black Forest Labs layouts share (flux_bfl_keys.cpp, flux2_bfl_keys.cpp): a double
// block's fused q/k/v projections and the QK norms' names, as diffusers 0.36.0's and 0.37.0's converters map them.

#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/key_rules.h"

namespace dpinfer::pipeline::bfl_block_keys {

/// A double block's fused projections, in the file's order.
inline const key_rules::FusedThirds kDoubleFused[] = {
    {"img_attn.qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}},
    {"txt_attn.qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}}};

/// The QK norms, whole keys (QKNorm's RMSNorm "scale" -> diffusers' RMSNorm "weight").
inline const key_rules::Renames kDoubleNorms{{"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
                                             {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
                                             {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
                                             {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"}};
inline const key_rules::Renames kSingleNorms{{"norm.query_norm.scale", "attn.norm_q.weight"},
                                             {"norm.key_norm.scale", "attn.norm_k.weight"}};

/// The parts of source tensor `s` (`t`, `key` without the file's prefix) of double block `n`, `rest` being the
/// key after "double_blocks.N.": a fused q/k/v as three row ranges, a QK norm, or the family's `renames`, under
/// transformer_blocks.N; a name none of them knows keeps `key`, for the strict loader to report.
inline void append_double_block(std::vector<TensorPart>& parts, size_t s, const SourceTensor& t, const std::string& key,
                                int64_t n, const std::string& rest, const key_rules::Renames& renames) {
  const std::string base = "transformer_blocks." + std::to_string(n) + ".";
  bool fused = false;
  for (const key_rules::FusedThirds& f : kDoubleFused) {
    const std::string leaf = key_rules::leaf_of(rest, f.from);
    if (leaf.empty()) continue;
    const std::string targets[3] = {base + f.to[0], base + f.to[1], base + f.to[2]};
    key_rules::append_thirds(parts, s, t, targets, leaf);
    fused = true;
  }
  if (fused) return;
  auto r = key_rules::exact(rest, kDoubleNorms);
  if (!r) r = key_rules::rename(rest, renames);
  parts.push_back(key_rules::whole(s, r ? base + *r : key, t.shape));
}

/// The same for single block `n` (single_transformer_blocks.N): a QK norm or the family's `renames`.
inline void append_single_block(std::vector<TensorPart>& parts, size_t s, const SourceTensor& t, const std::string& key,
                                int64_t n, const std::string& rest, const key_rules::Renames& renames) {
  auto r = key_rules::exact(rest, kSingleNorms);
  if (!r) r = key_rules::rename(rest, renames);
  parts.push_back(key_rules::whole(s, r ? "single_transformer_blocks." + std::to_string(n) + "." + *r : key, t.shape));
}

}  // namespace dpinfer::pipeline::bfl_block_keys

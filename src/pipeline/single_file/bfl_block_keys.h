#pragma once
// What FLUX.1's and FLUX.2's Black Forest Labs layouts share (flux_bfl_keys.cpp, flux2_bfl_keys.cpp): a double
// block's fused q/k/v projections and the QK norms' names, as diffusers 0.36.0's and 0.37.0's converters map them.

#include "key_rules.h"

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

}  // namespace dpinfer::pipeline::bfl_block_keys

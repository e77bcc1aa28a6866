#pragma once
// Latents to patch tokens and back, the way the DiTs patchify them.

#include <cstdint>

#include <ATen/ATen.h>

namespace dpinfer::pipeline::nn {

/// Z-Image's patchify: latents [B, C, F, H, W] to tokens [B, (F/pf)(H/p)(W/p), pf*p*p*C],
/// tokens in (f, h, w) order and each token's features in (pf, ph, pw, c) order
/// ("c f pf h ph w pw -> (f h w) (pf ph pw c)"). F, H and W must be divisible by the patch.
/// Ref: diffusers/models/transformers/transformer_z_image.py patchify_and_embed.
at::Tensor patchify_fhw(const at::Tensor& latents, int64_t patch, int64_t f_patch);

/// The inverse: tokens [B, (F/pf)(H/p)(W/p), pf*p*p*C] to [B, C, F, H, W].
/// Ref: transformer_z_image.py unpatchify ("f h w pf ph pw c -> c (f pf) (h ph) (w pw)").
at::Tensor unpatchify_fhw(const at::Tensor& tokens, int64_t channels, int64_t frames, int64_t height, int64_t width,
                          int64_t patch, int64_t f_patch);

}  // namespace dpinfer::pipeline::nn

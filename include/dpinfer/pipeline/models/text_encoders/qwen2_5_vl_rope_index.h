#pragma once
// Qwen2.5-VL's 3D multimodal rotary positions (M-RoPE) for a prompt that holds images: transformers'
// Qwen2_5_VLModel.get_rope_index, for images (Qwen-Image-Edit's prompt, issue 29). Pure: no model, no weights.

#include <array>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace dpinfer::pipeline {

/// The token ids and the vision setting get_rope_index reads from a Qwen2_5_VLConfig.
struct Qwen2_5_VLVisionTokens {
  /// <|image_pad|>: the processor expands one per image into t * (h / merge) * (w / merge) of them.
  int64_t image_token_id = 151655;
  /// <|vision_start|>: an image is counted where it is followed by image_token_id.
  int64_t vision_start_token_id = 151652;
  /// <|video_pad|>: a <|vision_start|> followed by it is a video, which dpinfer refuses. -1 for none.
  int64_t video_token_id = 151656;
  /// vision_config.spatial_merge_size: the vision tower merges merge x merge patches into one token.
  int64_t spatial_merge_size = 2;
};

/// get_rope_index's two results.
struct Qwen2_5_VLRopeIndex {
  /// [3, B, L] int64 on input_ids' device: the temporal, height and width position of each token.
  at::Tensor position_ids;
  /// [B, 1] int64 on input_ids' device: max position + 1 - L per row (what generation adds after the
  /// prompt; a text encoder does not need it).
  at::Tensor rope_deltas;
};

/// transformers 4.57.6 Qwen2_5_VLModel.get_rope_index(input_ids, image_grid_thw, None, attention_mask=...)
/// for prompts whose images were expanded by the processor. Per row, over its tokens where attention_mask
/// == 1 (all of them without a mask): text runs count on from 1 + the largest position so far, the same in
/// all three rows; an image's t * (h / merge) * (w / merge) tokens, starting at the first image token at or
/// after the text, get (0, y, x) + the position the text would have given it, for y < h / merge and x < w /
/// merge in row-major order, whatever t is: an image's second_per_grid_t is 0, so its temporal index
/// (frame * second_per_grid_t * tokens_per_second) is 0 for every frame, and tokens_per_second does not
/// enter. Positions where attention_mask != 1 are 1 in all three rows, as transformers leaves them.
///
/// input_ids [B, L] integer; attention_mask [B, L] (bool or integer) or undefined; image_grid_thw the {t, h,
/// w} of each image in the order the images appear, row after row (an image is a <|vision_start|> followed by
/// <|image_pad|>). With no images the positions are the text ones: cumsum(mask) - 1, padding at 1.
/// Throws dpinfer::Error where transformers would fail (fewer grids than images, an image's tokens running
/// past its row, a <|vision_start|> ending a row or a row without tokens), on a video, a grid that is not
/// positive, and on grids left over once every image has one (transformers ignores them: the prompt then
/// lacks an image).
Qwen2_5_VLRopeIndex qwen2_5_vl_rope_index(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                          const std::vector<std::array<int64_t, 3>>& image_grid_thw,
                                          const Qwen2_5_VLVisionTokens& tokens);

}  // namespace dpinfer::pipeline

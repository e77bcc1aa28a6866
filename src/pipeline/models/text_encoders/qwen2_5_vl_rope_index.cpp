#include "dpinfer/pipeline/models/text_encoders/qwen2_5_vl_rope_index.h"

#include <algorithm>
#include <string>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

Error rope_index_error(const std::string& what) { return Error("qwen2.5-vl rope index: " + what); }

std::string rope_index_grid(const std::array<int64_t, 3>& g) {
  return "{" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) + "}";
}

}  // namespace

// Ref: transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLModel.get_rope_index (4.57.6), the
// branch with image_grid_thw and without video_grid_thw. The loop runs on the host, as transformers' does
// (it reads the ids with tolist()): the prompts are short and the result is a few integers per token.
Qwen2_5_VLRopeIndex qwen2_5_vl_rope_index(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                          const std::vector<std::array<int64_t, 3>>& image_grid_thw,
                                          const Qwen2_5_VLVisionTokens& tokens) {
  if (input_ids.dim() != 2 || !at::isIntegralType(input_ids.scalar_type(), /*includeBool=*/false))
    throw rope_index_error("input_ids must be an integer tensor [batch, length], got " +
                std::string(input_ids.dtype().name()) + " " + c10::str(input_ids.sizes()));
  if (attention_mask.defined() &&
      (attention_mask.sizes() != input_ids.sizes() ||
       !(attention_mask.scalar_type() == at::kBool || at::isIntegralType(attention_mask.scalar_type(), false))))
    throw rope_index_error("attention_mask must be a bool or integer tensor shaped like input_ids " +
                c10::str(input_ids.sizes()) + ", got " + std::string(attention_mask.dtype().name()) + " " +
                c10::str(attention_mask.sizes()));
  const int64_t merge = tokens.spatial_merge_size;
  if (merge < 1) throw rope_index_error("spatial_merge_size must be >= 1, got " + std::to_string(merge));
  for (size_t i = 0; i < image_grid_thw.size(); ++i) {
    const auto& g = image_grid_thw[i];
    // transformers floors h / merge and w / merge; an image with no token in a row or column has none at all
    // (and transformers then fails on the max of an empty block).
    if (g[0] < 1 || g[1] / merge < 1 || g[2] / merge < 1)
      throw rope_index_error("image " + std::to_string(i) + "'s grid " + rope_index_grid(g) +
                  " must have t >= 1 and h, w >= spatial_merge_size = " + std::to_string(merge));
  }

  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  const at::Tensor ids = input_ids.to(at::kCPU, at::kLong).contiguous();
  // transformers: attention_mask == 1 selects a row's tokens (a bool mask's true is 1).
  const at::Tensor keep = attention_mask.defined() ? attention_mask.to(at::kCPU).to(at::kLong).eq(1).contiguous()
                                                   : at::ones({batch, length}, at::TensorOptions().dtype(at::kBool));
  // Padding positions keep the 1 that transformers initialises every position with.
  at::Tensor positions = at::ones({3, batch, length}, at::TensorOptions().dtype(at::kLong));
  at::Tensor deltas = at::empty({batch, 1}, at::TensorOptions().dtype(at::kLong));
  const auto id = ids.accessor<int64_t, 2>();
  const auto kept = keep.accessor<bool, 2>();
  auto pos = positions.accessor<int64_t, 3>();
  auto delta = deltas.accessor<int64_t, 2>();

  size_t image_index = 0;  // across the batch: the grids are the images of all rows in order
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> cols, row;  // the row's token positions in input_ids, and its tokens there
    for (int64_t l = 0; l < length; ++l)
      if (kept[b][l]) {
        cols.push_back(l);
        row.push_back(id[b][l]);
      }
    const auto n = static_cast<int64_t>(row.size());
    if (n == 0) throw rope_index_error("row " + std::to_string(b) + " has no tokens (its mask is all 0)");
    // The images: <|vision_start|> followed by <|image_pad|>.
    int64_t images = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (row[k] != tokens.vision_start_token_id) continue;
      if (k + 1 == n)
        throw rope_index_error("row " + std::to_string(b) + " ends with <|vision_start|> (token " +
                    std::to_string(tokens.vision_start_token_id) + ") and no image after it");
      if (row[k + 1] == tokens.image_token_id) ++images;
      if (tokens.video_token_id >= 0 && row[k + 1] == tokens.video_token_id)
        throw rope_index_error("row " + std::to_string(b) + " holds a video, which dpinfer does not support");
    }
    // One block of positions after another, as transformers' llm_pos_ids_list: each text block starts at the
    // largest position of the block before it + 1 (0 for the first).
    std::vector<std::array<int64_t, 3>> out(static_cast<size_t>(n));
    int64_t next = 0;  // the largest position of the last block + 1
    int64_t st = 0;    // the first token not yet given a position
    int64_t row_max = 0;
    for (int64_t i = 0; i < images; ++i) {
      const auto found = std::find(row.begin() + st, row.end(), tokens.image_token_id);
      if (found == row.end())
        throw rope_index_error("row " + std::to_string(b) + " has no <|image_pad|> left for its image " +
                    std::to_string(i) + " (an earlier image's grid covers fewer tokens than its run)");
      if (image_index >= image_grid_thw.size())
        throw rope_index_error("the prompts hold more images than the " +
                    std::to_string(image_grid_thw.size()) + " grids given");
      const auto& grid = image_grid_thw[image_index++];
      const int64_t ed = found - row.begin();
      const int64_t gt = grid[0], gh = grid[1] / merge, gw = grid[2] / merge;
      if (ed + gt * gh * gw > n)
        throw rope_index_error("row " + std::to_string(b) + "'s image " + std::to_string(i) + " (grid " +
                    rope_index_grid(grid) + ", " + std::to_string(gt * gh * gw) + " tokens from token " +
                    std::to_string(ed) + ") runs past the row's " + std::to_string(n) + " tokens");
      for (int64_t k = st; k < ed; ++k) out[k] = {next + k - st, next + k - st, next + k - st};  // text
      // The image: an image's second_per_grid_t is 0, so every frame has temporal index 0 (tokens_per_second
      // multiplies that 0); height and width count its merged rows and columns.
      const int64_t base = next + (ed - st);
      int64_t k = ed;
      for (int64_t f = 0; f < gt; ++f)
        for (int64_t y = 0; y < gh; ++y)
          for (int64_t x = 0; x < gw; ++x) out[k++] = {base, base + y, base + x};
      next = base + std::max(gh, gw);  // the block's largest position, base + max(0, gh - 1, gw - 1), + 1
      row_max = std::max(row_max, next - 1);
      st = k;
    }
    for (int64_t k = st; k < n; ++k) out[k] = {next + k - st, next + k - st, next + k - st};  // trailing text
    if (st < n) row_max = std::max(row_max, next + n - 1 - st);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t d = 0; d < 3; ++d) pos[d][b][cols[k]] = out[k][d];
    // transformers: llm_positions.max() + 1 - len(input_ids[i]), the padded length.
    delta[b][0] = row_max + 1 - length;
  }
  if (image_index != image_grid_thw.size())
    throw rope_index_error(std::to_string(image_grid_thw.size()) + " image grids for " +
                std::to_string(image_index) + " images in the prompts (<|vision_start|> <|image_pad|>)");
  return {positions.to(input_ids.device()), deltas.to(input_ids.device())};
}

}  // namespace dpinfer::pipeline

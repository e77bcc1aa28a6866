// libFuzzer: the DiT single-file key conversions (pipeline/conversion/flux_bfl_keys.h, also Chroma's,
// z_image_keys.h, sd3_keys.h, flux2_bfl_keys.h) and the DiT family detection (dit_detection.h) on arbitrary key lists,
// as a checkpoint's header gives them. The first byte picks the prefix (bit 0: ComfyUI's
// "model.diffusion_model." or none), FLUX.1's inner dimension (bits 1-4: 0..15) and the layout
// (bit 7: FLUX.2's, else bit 6: SD3's MMDiT, else bit 5: Z-Image's, else FLUX.1's / Chroma's); the rest is one tensor per
// line, "name d0 d1 ...", each dimension a byte of the line after the first space. Checked: no
// crash, one-line messages, every part reads inside its source tensor with as many elements as it
// fills, under a non-empty name, SD3's dual-attention blocks ascending and inside its block count,
// and the pieces of a module tensor (target_row) fill its rows exactly once when the tensors' names
// are unique, as a safetensors header's are.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/conversion/flux2_bfl_keys.h"
#include "dpinfer/pipeline/conversion/flux_bfl_keys.h"
#include "dpinfer/pipeline/conversion/sd3_keys.h"
#include "dpinfer/pipeline/conversion/z_image_keys.h"
#include "dpinfer/pipeline/single_file/dit_detection.h"
#include "dpinfer/util/error.h"
#include "fuzz_key_list.h"
#include "fuzz_support.h"

using namespace dpinfer;
using namespace dpinfer::pipeline;

using fuzz::numel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::vector<SourceTensor> tensors = fuzz::key_list(data + 1, size - 1);
  try {
    detect_dit_checkpoint(tensors, "fuzz.safetensors");
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  const std::string prefix = (pick & 1) ? "model.diffusion_model." : "";
  const FluxBflBlocks blocks = count_flux_bfl_blocks(prefix, tensors);
  if (blocks.double_blocks < 0 || blocks.single_blocks < 0 || blocks.approximator_layers < 0) std::abort();
  const Flux2BflShape flux2 = flux2_bfl_shape(prefix, tensors);
  if (flux2.double_blocks < 0 || flux2.single_blocks < 0 || flux2.in_channels < 0 || flux2.joint_attention_dim < 0)
    std::abort();
  const Sd3Blocks sd3 = count_sd3_blocks(prefix, tensors);
  if (sd3.joint_blocks < 0 || sd3.pos_embed_rows < 0) std::abort();
  for (size_t i = 0; i < sd3.dual_attention_layers.size(); ++i)
    if (sd3.dual_attention_layers[i] < 0 || sd3.dual_attention_layers[i] >= sd3.joint_blocks ||
        (i > 0 && sd3.dual_attention_layers[i] <= sd3.dual_attention_layers[i - 1]))
      std::abort();
  try {
    const std::vector<TensorPart> parts = (pick & 128)  ? convert_flux2_bfl_keys(prefix, tensors)
                                          : (pick & 64) ? convert_sd3_keys(prefix, tensors)
                                          : (pick & 32) ? convert_z_image_keys(prefix, "2-1", tensors)
                                                        : convert_flux_bfl_keys(prefix, (pick >> 1) & 15, tensors);
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> pieces;  // target -> (row, rows)
    for (const TensorPart& p : parts) {
      const int64_t elements = fuzz::elements_read(p, tensors);
      if (p.target_row >= 0) {
        if (p.rows < 0 || p.shape.empty() || p.target_row + p.rows > p.shape[0]) std::abort();
        const int64_t per_row = p.shape[0] == 0 ? 0 : numel(p.shape) / p.shape[0];
        if (p.shape[0] != 0 && per_row * p.rows != elements) std::abort();
        pieces[p.target].emplace_back(p.target_row, p.rows);
      } else if (numel(p.shape) != elements) {
        std::abort();
      }
      if (p.transpose) std::abort();  // nothing of these is stored transposed
    }
    // A header names each tensor once (the loader reports a tensor filled twice as a mismatch).
    std::map<std::string, int> names;
    for (const SourceTensor& t : tensors) ++names[t.name];
    bool unique = true;
    for (const auto& [name, n] : names) unique = unique && n == 1;
    for (auto& [target, rows] : pieces) {
      if (!unique) break;
      std::sort(rows.begin(), rows.end());
      int64_t next = 0;
      for (const auto& [row, n] : rows) {
        if (row != next) std::abort();
        next = row + n;
      }
    }
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

// libFuzzer: the single-file key conversion (pipeline/conversion/ldm_keys.h) and family
// detection (ldm_detection.h) on arbitrary key lists, as a checkpoint's header gives them. The
// first byte picks the layout (bits 0-1), the prefix (bit 2: the layout's LDM prefix or none)
// and the module facts (bits 3-5: layers_per_block 0..3 / levels / text layers; bit 6: a text
// projection; bit 7 with the transformers CLIP layout: SD3's CLIP-L, under its prefix); the rest
// is one tensor per line, "name d0 d1 ...", each dimension a byte of the line after the first
// space. Checked: no crash, one-line messages, and every part reads inside its source tensor with
// as many elements as the part's shape has, under a non-empty name.
#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/ldm_keys.h"
#include "dpinfer/pipeline/single_file/ldm_detection.h"
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
    detect_ldm_checkpoint(tensors, "fuzz.safetensors");
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  static const CheckpointLayout kLayouts[] = {CheckpointLayout::kLdmUNet, CheckpointLayout::kLdmVae,
                                             CheckpointLayout::kTransformersClip, CheckpointLayout::kOpenClip};
  static const char* kPrefixes[] = {"model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer.",
                                    "cond_stage_model.model."};
  static const char* kSd3ClipLPrefix = "text_encoders.clip_l.transformer.";
  const int layout = pick & 3;
  const bool sd3_clip_l = layout == 2 && (pick & 128);
  LayoutShape shape;
  shape.unet_layers_per_block = (pick >> 3) & 3;
  shape.vae_levels = (pick >> 3) & 7;
  shape.text_layers = (pick >> 3) & 7;
  shape.text_projection = (pick >> 6) & 1;
  try {
    const std::vector<TensorPart> parts =
        sd3_clip_l ? convert_ldm_keys(CheckpointLayout::kSd3ClipL, (pick & 4) ? kSd3ClipLPrefix : "", shape, tensors)
                   : convert_ldm_keys(kLayouts[layout], (pick & 4) ? kPrefixes[layout] : "", shape, tensors);
    for (const TensorPart& p : parts) {
      if (numel(p.shape) != fuzz::elements_read(p, tensors)) std::abort();
      if (p.transpose && p.shape.size() != 2) std::abort();
    }
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

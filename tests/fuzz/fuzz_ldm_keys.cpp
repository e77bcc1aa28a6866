// libFuzzer: the single-file key conversion (pipeline/single_file/ldm_keys.h) and family
// detection (ldm_detection.h) on arbitrary key lists, as a checkpoint's header gives them. The
// first byte picks the layout (bits 0-1), the prefix (bit 2: the layout's LDM prefix or none)
// and the module facts (bits 3-5: layers_per_block 0..3 / levels / text layers; bit 6: a text
// projection); the rest is one tensor per line, "name d0 d1 ...", each dimension a byte of
// the line after the first space. Checked: no crash, one-line messages, and every part reads
// inside its source tensor with as many elements as the part's shape has, under a non-empty name.
#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/single_file/ldm_detection.h"
#include "dpinfer/pipeline/single_file/ldm_keys.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;
using namespace dpinfer::pipeline;

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  std::vector<SourceTensor> tensors;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t begin = 0;
  while (begin < text.size() && tensors.size() < 256) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t space = line.find(' ');
    SourceTensor t;
    t.name = line.substr(0, space);
    if (space != std::string::npos)
      for (size_t i = space + 1; i < line.size() && t.shape.size() < 4; ++i)
        t.shape.push_back(static_cast<uint8_t>(line[i]) % 16);  // small: products stay exact
    tensors.push_back(std::move(t));
    begin = end + 1;
  }
  try {
    detect_ldm_checkpoint(tensors, "fuzz.safetensors");
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  static const CheckpointLayout kLayouts[] = {CheckpointLayout::kLdmUNet, CheckpointLayout::kLdmVae,
                                             CheckpointLayout::kTransformersClip, CheckpointLayout::kOpenClip};
  static const char* kPrefixes[] = {"model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer.",
                                    "cond_stage_model.model."};
  const int layout = pick & 3;
  LayoutShape shape;
  shape.unet_layers_per_block = (pick >> 3) & 3;
  shape.vae_levels = (pick >> 3) & 7;
  shape.text_layers = (pick >> 3) & 7;
  shape.text_projection = (pick >> 6) & 1;
  try {
    const std::vector<TensorPart> parts =
        convert_ldm_keys(kLayouts[layout], (pick & 4) ? kPrefixes[layout] : "", shape, tensors);
    for (const TensorPart& p : parts) {
      if (p.source >= tensors.size()) std::abort();
      const SourceTensor& s = tensors[p.source];
      int64_t elements = numel(s.shape);
      if (p.rows >= 0) {
        if (s.shape.empty() || p.row_begin < 0 || p.row_begin + p.rows > s.shape[0]) std::abort();
        elements = s.shape[0] == 0 ? 0 : elements / s.shape[0] * p.rows;
      }
      if (numel(p.shape) != elements) std::abort();
      if (p.transpose && p.shape.size() != 2) std::abort();
      if (p.target.empty()) std::abort();  // names are the file's bytes, printed only through printable()
    }
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

// libFuzzer: the DiT single-file key conversions (pipeline/single_file/flux_bfl_keys.h,
// z_image_keys.h) and the DiT family detection (dit_detection.h) on arbitrary key lists, as a
// checkpoint's header gives them. The first byte picks the prefix (bit 0: ComfyUI's
// "model.diffusion_model." or none), FLUX.1's inner dimension (bits 1-4: 0..15) and the layout
// (bit 5: Z-Image's, else FLUX.1's); the rest is one tensor per line, "name d0 d1 ...",
// each dimension a byte of the line after the first space. Checked: no crash, one-line messages,
// every part reads inside its source tensor with as many elements as it fills, under a non-empty
// name, and the pieces of a module tensor (target_row) fill its rows exactly once when the
// tensors' names are unique, as a safetensors header's are.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/single_file/dit_detection.h"
#include "dpinfer/pipeline/single_file/flux_bfl_keys.h"
#include "dpinfer/pipeline/single_file/z_image_keys.h"
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
    detect_dit_checkpoint(tensors, "fuzz.safetensors");
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  const std::string prefix = (pick & 1) ? "model.diffusion_model." : "";
  const FluxBflBlocks blocks = count_flux_bfl_blocks(prefix, tensors);
  if (blocks.double_blocks < 0 || blocks.single_blocks < 0) std::abort();
  try {
    const std::vector<TensorPart> parts = (pick & 32) ? convert_z_image_keys(prefix, "2-1", tensors)
                                                      : convert_flux_bfl_keys(prefix, (pick >> 1) & 15, tensors);
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> pieces;  // target -> (row, rows)
    for (const TensorPart& p : parts) {
      if (p.source >= tensors.size()) std::abort();
      const SourceTensor& s = tensors[p.source];
      int64_t elements = numel(s.shape);
      if (p.rows >= 0) {
        if (s.shape.empty() || p.row_begin < 0 || p.rows < 0 || p.row_begin + p.rows > s.shape[0]) std::abort();
        elements = s.shape[0] == 0 ? 0 : elements / s.shape[0] * p.rows;
      }
      if (p.target_row >= 0) {
        if (p.rows < 0 || p.shape.empty() || p.target_row + p.rows > p.shape[0]) std::abort();
        const int64_t per_row = p.shape[0] == 0 ? 0 : numel(p.shape) / p.shape[0];
        if (p.shape[0] != 0 && per_row * p.rows != elements) std::abort();
        pieces[p.target].emplace_back(p.target_row, p.rows);
      } else if (numel(p.shape) != elements) {
        std::abort();
      }
      if (p.transpose) std::abort();  // nothing of these is stored transposed
      if (p.target.empty()) std::abort();
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

#pragma once
// Tensors of a checkpoint file read under other names, in parts or reshaped: what a
// single-file checkpoint's key conversion (conversion/ldm_keys.h) gives load_weights().
// Free of LibTorch types, so that the conversion can be fuzzed without it.
//
// conversion/ is the one room of checkpoint key conversion: names and shapes in, TensorParts out. It includes no
// other room of the pipeline (tests/layering/check_layering.sh checks it); loading/ and single_file/ both read
// through it, and loading/ never reaches into single_file/.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// A tensor of a checkpoint file, by name and shape: what a KeyConverter sees.
struct SourceTensor {
  std::string name;
  std::vector<int64_t> shape;
};

/// The tensor of `tensors` named `name`, or null.
inline const SourceTensor* find_source_tensor(const std::vector<SourceTensor>& tensors, const std::string& name) {
  for (const SourceTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

/// One module tensor read from a checkpoint tensor under another name: all of it, or the
/// rows [row_begin, row_begin + rows) of its first dimension (a fused q/k/v split without a
/// copy: a contiguous range of the file), seen with `shape` (same element count; a 1x1
/// convolution read as a linear weight), or transposed (2-D only).
///
/// A part with `target_row` set is one piece of a module tensor that several parts fill:
/// its rows land at [target_row, target_row + rows) of the module tensor, whose whole shape
/// `shape` then is (every piece of a target gives the same). The pieces must tile the module
/// tensor's rows exactly. This reorders row blocks without copying a tensor whole: BFL's
/// final_layer.adaLN_modulation.1 stores (shift, scale), diffusers' norm_out.linear (scale, shift).
struct TensorPart {
  size_t source = 0;            ///< index into the SourceTensor list converted
  std::string target;           ///< the module key
  int64_t row_begin = 0;
  int64_t rows = -1;            ///< -1: every row
  std::vector<int64_t> shape;   ///< the shape the module sees (of the whole module tensor, for a piece)
  bool transpose = false;       ///< a 2-D tensor stored [in, out] for a module's [out, in]
  int64_t target_row = -1;      ///< >= 0: a piece, at this row of the module tensor (needs rows >= 0)
};

/// Maps the tensors of one checkpoint file to the module's keys (conversion/ldm_keys.h).
/// Tensors it gives no part for are not loaded and not reported (other components'
/// tensors of a single-file checkpoint). Throws InputError for a file it cannot convert.
using KeyConverter = std::function<std::vector<TensorPart>(const std::vector<SourceTensor>&)>;

}  // namespace dpinfer::pipeline

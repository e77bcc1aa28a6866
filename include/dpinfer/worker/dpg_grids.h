#pragma once
// --layout dpg (plan::Layout::kDpgBench): DPG-Bench's compute_dpg_bench.py opens one image per
// prompt id, OUT/grids/<id>.png, and crops it as a 2x2 grid of `--resolution` pixels: image 0 top
// left, 1 top right, 2 bottom left, 3 bottom right (its crop_tuples_list). The ranks write the four
// images as samples/<id>_<j>.png; rank 0 composes the grids at the end of a run.

#include <cstdint>
#include <string>

#include "dpinfer/plan/items.h"

namespace dpinfer::worker {

struct DpgGrids {
  int64_t made = 0;        ///< grids written now
  int64_t incomplete = 0;  ///< prompts with fewer than 4 images in OUT (failed, or another shard's)
};

/// For each prompt line of `items` (4 items each) whose 4 images are in `out` and whose grid is
/// not, writes OUT/grids/<name>.png atomically. Throws Error when an image cannot be read or the
/// four differ in size.
DpgGrids make_dpg_grids(const std::string& out, const plan::ItemList& items, const plan::OutputLayout& layout);

}  // namespace dpinfer::worker

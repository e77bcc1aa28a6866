#pragma once
// The batches of a run, fixed by the prompts file and --batch-size alone.
//
// Why: in bf16 and fp16 a matrix product rounds differently for another number of rows
// (torch's kernels pick their blocking by shape), and half precision keeps the difference:
// an item made in a batch of 2 differs from the same item made in a batch of 1 or 3 by up to
// 14 levels of 255. Some families also pad a batch's prompts to its longest one. So an image
// is bit-identical across runs only when it is made beside the same batch-mates, in the same
// places. The batches are therefore cut from the whole item list before anything is shared
// out, and everything that shares out work takes whole batches: outer shards (--shard, job
// arrays), ranks in every --shard-mode, dynamic claims, and a resume, which makes a batch's
// missing items in that batch again.
//
// The rule, a function of the prompts file alone:
//  - a line's batch key is what it sets of steps, guidance_scale, width, height, settings,
//    loras and strength, and whether it sets an image (an img2img item runs another schedule), as written (the run's options and the model's defaults are the same for
//    every line, so they do not matter here);
//  - consecutive lines with the same key form a group, whose items may share a batch;
//  - a group is cut every B items from its first, so only its last batch may be short.
// Kept in O(lines): a file of a billion items has no billion-entry list.

#include <cstdint>
#include <utility>
#include <vector>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/plan/sharding.h"

namespace dpinfer::plan {

/// Items [first, first + size) of the item list.
struct ItemSpan {
  int64_t first = 0;
  int64_t size = 0;
  int64_t end() const { return first + size; }
  bool operator==(const ItemSpan& o) const { return first == o.first && size == o.size; }
};

/// True when two prompt lines' items may share a batch: they set the same steps,
/// guidance_scale, width, height, settings and loras (each set or not alike).
bool same_batch_key(const io::PromptSpec& a, const io::PromptSpec& b);

class BatchPlan {
 public:
  /// The batches of `specs` (the prompts file as read, before the worker resolves anything)
  /// at `batch_size` (>= 1) items a batch; a line gives its num_images items, or
  /// `default_num_images` when it sets none. Lines are in file order, as ItemList numbers them.
  BatchPlan(const std::vector<io::PromptSpec>& specs, int default_num_images, int batch_size);

  int64_t size() const { return batches_; }     ///< number of batches
  int64_t items() const { return items_; }      ///< number of items
  int batch_size() const { return batch_size_; }
  int64_t groups() const { return static_cast<int64_t>(group_first_item_.size()); }
  /// Batches of fewer than batch_size() items: at most one per group.
  int64_t short_batches() const { return short_batches_; }

  /// The items of batch `b` (0 <= b < size()); throws std::out_of_range.
  ItemSpan at(int64_t b) const;

  /// The batch that holds item `item` (0 <= item < items()); throws std::out_of_range.
  int64_t batch_of(int64_t item) const;

  /// The items of batches [b_begin, b_end), a contiguous range since batches are.
  ItemSpan items_of(int64_t b_begin, int64_t b_end) const;

  /// Outer shard `shard`: contiguous_range() over the batches, as batches [first, end).
  std::pair<int64_t, int64_t> shard_batches(const OuterShard& shard) const;

  /// The same shard as items: what `dpinfer status` counts and run.json's items_in_shard.
  ItemSpan shard_items(const OuterShard& shard) const;

 private:
  int batch_size_;
  std::vector<int64_t> group_first_item_;   ///< per group: its first item
  std::vector<int64_t> group_first_batch_;  ///< per group: its first batch
  int64_t items_ = 0, batches_ = 0, short_batches_ = 0;
};

}  // namespace dpinfer::plan

#include "dpinfer/plan/batches.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dpinfer::plan {

bool same_batch_key(const io::PromptSpec& a, const io::PromptSpec& b) {
  return a.steps == b.steps && a.guidance_scale == b.guidance_scale && a.width == b.width && a.height == b.height &&
         a.settings == b.settings && a.loras == b.loras && a.image.has_value() == b.image.has_value() &&
         a.mask.has_value() == b.mask.has_value() && a.strength == b.strength;
}

BatchPlan::BatchPlan(const std::vector<io::PromptSpec>& specs, int default_num_images, int batch_size)
    : batch_size_(std::max(batch_size, 1)) {
  const io::PromptSpec* previous = nullptr;
  int64_t group_items = 0;
  const auto close_group = [&] {
    if (group_items == 0) return;
    const int64_t batches = (group_items + batch_size_ - 1) / batch_size_;
    batches_ += batches;
    if (group_items % batch_size_) ++short_batches_;
  };
  for (const io::PromptSpec& s : specs) {
    const int64_t images = s.num_images.value_or(default_num_images);
    if (images <= 0) continue;  // gives no item (ItemList refuses it first)
    if (!previous || !same_batch_key(*previous, s)) {
      close_group();
      group_first_item_.push_back(items_);
      group_first_batch_.push_back(batches_);
      group_items = 0;
    }
    previous = &s;
    group_items += images;
    items_ += images;
  }
  close_group();
}

ItemSpan BatchPlan::at(int64_t b) const {
  if (b < 0 || b >= batches_) throw std::out_of_range("batch " + std::to_string(b) + " of " + std::to_string(batches_));
  const size_t g =
      static_cast<size_t>(std::upper_bound(group_first_batch_.begin(), group_first_batch_.end(), b) -
                          group_first_batch_.begin()) - 1;
  const int64_t group_end = g + 1 < group_first_item_.size() ? group_first_item_[g + 1] : items_;
  const int64_t first = group_first_item_[g] + (b - group_first_batch_[g]) * batch_size_;
  return {first, std::min<int64_t>(batch_size_, group_end - first)};
}

int64_t BatchPlan::batch_of(int64_t item) const {
  if (item < 0 || item >= items_)
    throw std::out_of_range("item " + std::to_string(item) + " of " + std::to_string(items_));
  const size_t g =
      static_cast<size_t>(std::upper_bound(group_first_item_.begin(), group_first_item_.end(), item) -
                          group_first_item_.begin()) - 1;
  return group_first_batch_[g] + (item - group_first_item_[g]) / batch_size_;
}

ItemSpan BatchPlan::items_of(int64_t b_begin, int64_t b_end) const {
  if (b_begin >= b_end) {
    const int64_t at_item = b_begin < batches_ ? at(b_begin).first : items_;
    return {at_item, 0};
  }
  const int64_t first = at(b_begin).first;
  return {first, at(b_end - 1).end() - first};
}

std::pair<int64_t, int64_t> BatchPlan::shard_batches(const OuterShard& shard) const {
  return contiguous_range(batches_, shard.count, shard.index);
}

ItemSpan BatchPlan::shard_items(const OuterShard& shard) const {
  const auto [b, e] = shard_batches(shard);
  return items_of(b, e);
}

}  // namespace dpinfer::plan

#include "dpinfer/plan/items.h"

#include <cstdio>
#include <limits>

#include "dpinfer/util/error.h"

namespace dpinfer::plan {

std::vector<Item> expand_items(const std::vector<io::PromptSpec>& specs, const ItemDefaults& d) {
  std::vector<Item> items;
  for (const io::PromptSpec& s : specs) {
    for (int j = 0; j < s.num_images; ++j) {
      Item it;
      it.index = static_cast<int64_t>(items.size());
      it.line = s.line;
      it.image = j;
      it.prompt = s.prompt;
      it.negative_prompt = s.negative_prompt.value_or(d.negative_prompt);
      if (!s.seed && d.seed > std::numeric_limits<int64_t>::max() - it.index)
        throw InputError("--seed " + std::to_string(d.seed) + ": item " + std::to_string(it.index) +
                         " would get a seed past 2^63-1 (seed + item index); lower --seed");
      it.seed = s.seed ? *s.seed + j : d.seed + it.index;
      it.steps = s.steps.value_or(d.steps);
      it.guidance_scale = s.guidance_scale.value_or(d.guidance_scale);
      it.width = s.width.value_or(d.width);
      it.height = s.height.value_or(d.height);
      it.id = s.id;
      it.settings = d.settings;
      if (s.settings) it.settings.update(*s.settings);
      items.push_back(std::move(it));
    }
  }
  return items;
}

std::string item_file_name(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld.png", static_cast<long long>(index));
  return buf;
}

}  // namespace dpinfer::plan

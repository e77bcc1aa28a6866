#pragma once
// Items: one image each. Prompt i with num_images n gives n consecutive items;
// items are numbered 0..N-1 in file order, so an item's index is its identity
// across runs, world sizes, batch sizes and scheduling modes.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/io/prompt_file.h"

namespace dpinfer::plan {

/// Values for what a prompt line does not set.
struct ItemDefaults {
  std::string negative_prompt;
  int64_t seed = 0;
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
  /// The run's model settings (--set, --clip-skip, ...): what a line sets none of gets.
  nlohmann::json settings = nlohmann::json::object();
};

struct Item {
  int64_t index = 0;
  int line = 0;         ///< prompt file line
  int image = 0;        ///< j < num_images of its prompt
  std::string prompt;
  std::string negative_prompt;
  int64_t seed = 0;
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
  std::optional<std::string> id;
  /// The model settings: the run's, with the line's own over them (not yet checked
  /// against the model's family; the worker completes them with its defaults).
  nlohmann::json settings = nlohmann::json::object();

  /// Items batch together when they share all of these.
  bool batches_with(const Item& o) const {
    return steps == o.steps && guidance_scale == o.guidance_scale && width == o.width && height == o.height &&
           settings == o.settings;
  }
};

/// Expands prompt lines into items. An item's seed is `defaults.seed + index`, or,
/// when its line gives a seed, that seed + j. It never depends on rank, world size,
/// batch size, scheduling mode or restarts.
std::vector<Item> expand_items(const std::vector<io::PromptSpec>& specs, const ItemDefaults& defaults);

/// "000042.png": the index zero-padded to at least 6 digits.
std::string item_file_name(int64_t index);

}  // namespace dpinfer::plan

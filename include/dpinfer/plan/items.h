#pragma once
// Items: one image each. Prompt i with num_images n gives n consecutive items;
// items are numbered 0..N-1 in file order, so an item's index is its identity
// across runs, world sizes, batch sizes and scheduling modes.
//
// The items of a prompts file are never all in memory: an ItemList keeps the prompt
// lines and a prefix sum of their image counts, and makes an Item when asked for one,
// so 100 lines of num_images 100000 cost 100 lines, not ten million items.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dpinfer/io/prompt_file.h"

namespace dpinfer::plan {

/// Where an item's seed comes from when its prompt line gives none (--seed-from).
enum class SeedFrom {
  kIndex,   ///< --seed + the item's index (the default)
  kPrompt,  ///< --seed + prompt_seed_hash(prompt, occurrence): the prompt's place in the file does not matter
};

/// "index" or "prompt"; throws UsageError otherwise.
SeedFrom parse_seed_from(const std::string& name);
std::string to_string(SeedFrom from);

/// The hash behind --seed-from prompt, fixed for good: seeds made with it must come out
/// the same on every machine, compiler and dpinfer version. It is FNV-1a 64 (offset basis
/// 0xcbf29ce484222325, prime 0x100000001b3) over the prompt's UTF-8 bytes, one 0x00 byte,
/// and `occurrence` in decimal ASCII digits, with the top bit then cleared (so 0..2^63-1).
/// In Python:
///   h = 0xcbf29ce484222325
///   for b in prompt.encode() + b"\0" + str(occurrence).encode(): h = ((h ^ b) * 0x100000001b3) % 2**64
///   h &= 2**63 - 1
uint64_t prompt_seed_hash(std::string_view prompt, int64_t occurrence);

/// The most items a prompts file may give (the sum of its num_images). Bounds what a run
/// keeps per item (one bit each, for resume) and keeps every count well inside int64.
constexpr int64_t kMaxItems = 1'000'000'000;

/// Values for what a prompt line does not set.
struct ItemDefaults {
  /// Images of a line that sets no num_images (--num-images).
  int num_images = 1;
  std::string negative_prompt;
  int64_t seed = 0;
  SeedFrom seed_from = SeedFrom::kIndex;
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
  /// The run's model settings (--set, --clip-skip, ...): what a line sets none of gets.
  nlohmann::json settings = nlohmann::json::object();
  /// The run's LoRAs (--lora): what a line that names none gets.
  io::LoraSet loras;
  /// The run's input image (--image) for lines that set none; empty: none.
  std::string image;
  /// The img2img strength of items with an image whose line sets none (--strength, else the family's).
  double strength = 0;
  /// The run's inpainting mask (--mask) for lines with an image that set none; empty: none.
  std::string mask;
  /// The strength of inpainting items whose line sets none (--strength, else the family's inpainting default).
  double inpaint_strength = 0;
};

struct Item {
  int64_t index = 0;
  int line = 0;         ///< prompt file line
  int64_t prompt_index = 0;  ///< its line's place among the file's prompt lines, from 0
  int image = 0;        ///< j < num_images of its prompt
  std::string prompt;
  std::string negative_prompt;
  int64_t seed = 0;
  SeedFrom seed_from = SeedFrom::kIndex;  ///< the run's --seed-from (recorded; a line's own seed still wins)
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
  std::optional<std::string> id;
  /// The model settings: the run's, with the line's own over them (not yet checked
  /// against the model's family; the worker completes them with its defaults).
  nlohmann::json settings = nlohmann::json::object();
  /// The LoRAs merged into the model for this item: its line's "loras", else the run's.
  io::LoraSet loras;
  /// Its line's fields that --keep-fields carries into the record as they are (an object).
  nlohmann::json fields = nlohmann::json::object();
  /// img2img (issue 29): the input image's path (its line's, resolved by the worker, else the run's
  /// --image), empty for a text-to-image item; and its strength (0 without an image).
  std::string image_path;
  double strength = 0;
  /// The input image's SHA-256 (64 hex digits), filled by the worker (item records, resume); empty
  /// without an image or when the file could not be read.
  std::string image_sha256;
  /// A reference-editing model's second and later references (its line's `image` list after the first), and
  /// their SHA-256s once the worker fills them; empty for one image or none.
  std::vector<std::string> more_image_paths;
  std::vector<std::string> more_image_sha256;
  /// Inpainting: the mask's path (empty without one) and SHA-256, as for the image.
  std::string mask_path;
  std::string mask_sha256;

  /// What the items of one batch share (a batch runs on one set of merged weights, so items
  /// with other LoRAs are in another batch): the worker checks every batch of the plan
  /// (plan/batches.h) with it. `any_size`: sizes may differ (a pipeline that takes an item's size from its
  /// reference, and runs each reference size as its own batch).
  bool batches_with(const Item& o, bool any_size = false) const {
    return steps == o.steps && guidance_scale == o.guidance_scale && (any_size || (width == o.width && height == o.height)) &&
           settings == o.settings && loras == o.loras && image_path.empty() == o.image_path.empty() &&
           mask_path.empty() == o.mask_path.empty() && strength == o.strength;
  }
};

/// The items of a prompts file, made on demand by index. A line gives its num_images, or
/// defaults.num_images, consecutive items. An item's seed is its line's
/// seed + j when the line gives one; otherwise `defaults.seed + index` (SeedFrom::kIndex),
/// or `(defaults.seed + prompt_seed_hash(prompt, k)) mod 2^63` (SeedFrom::kPrompt), where
/// k counts the earlier items with the same prompt text (0 for its first). It never
/// depends on rank, world size, batch size, scheduling mode or restarts.
class ItemList {
 public:
  /// Throws InputError when the lines give more than kMaxItems items, or when a seed
  /// would pass 2^63-1 (index mode: --seed + the last index; a line's seed + its
  /// last image).
  ItemList(std::vector<io::PromptSpec> specs, ItemDefaults defaults);

  /// The number of items: the sum of the lines' num_images (defaults.num_images for a
  /// line that sets none).
  int64_t size() const { return total_; }
  bool empty() const { return total_ == 0; }

  /// Item `index` (0 <= index < size()); throws std::out_of_range otherwise.
  Item at(int64_t index) const;

  /// The prompt text of item `index`, without making the item.
  const std::string& prompt_of(int64_t index) const;

  /// The position in specs() of the line that gives item `index`; throws std::out_of_range.
  size_t spec_of(int64_t index) const;

  const std::vector<io::PromptSpec>& specs() const { return specs_; }
  const ItemDefaults& defaults() const { return defaults_; }

 private:

  std::vector<io::PromptSpec> specs_;
  ItemDefaults defaults_;
  std::vector<int64_t> first_;       ///< per line: the index of its first item
  std::vector<int64_t> occurrence_;  ///< per line (kPrompt): earlier items with the same prompt text
  int64_t total_ = 0;
};

/// The image files a run writes (--image-format).
enum class ImageFormat { kPng, kJpeg, kWebp };

/// png, jpeg (also jpg) or webp; throws UsageError naming --image-format otherwise.
ImageFormat parse_image_format(const std::string& name);

/// "png", "jpeg" or "webp", as --image-format and run.json say it.
std::string to_string(ImageFormat format);

/// "PNG", "JPEG" or "WebP", for messages.
std::string label_of(ImageFormat format);

/// The format whose extension `file_name` has (.png, .jpg, .webp); nullopt for another.
std::optional<ImageFormat> image_format_of_file_name(const std::string& file_name);

/// The largest --files-per-dir: one directory for every item a prompts file may give.
constexpr int64_t kMaxFilesPerDir = kMaxItems;

/// An item's image, relative to --out: "000042.png" (or ".jpg"), the index zero-padded to at
/// least 6 digits. With files_per_dir N > 0 (--files-per-dir), in numbered subdirectories of N
/// images each, as img2dataset lays out its shards: "00004/000042.png" for N = 10, the directory
/// index / N zero-padded to at least 5 digits. 0 is the flat layout.
std::string item_file_name(int64_t index, ImageFormat format = ImageFormat::kPng, int64_t files_per_dir = 0);

/// Where a run puts its images (--layout): flat in --out (with --files-per-dir's
/// subdirectories), or as a benchmark's evaluation script reads them.
enum class Layout {
  kFlat,
  /// GenEval (djghosh13/geneval, evaluation/evaluate_images.py): OUT/<k, 5 digits>/samples/<j, 5
  /// digits>.png for image j of prompt line k, beside OUT/<k>/metadata.jsonl, the line's object.
  kGeneval,
  /// T2I-CompBench (BLIPvqa_eval/BLIP_vqa.py and the other metrics): OUT/samples/<prompt>_<item
  /// index, 6 digits>.png; the scripts take the prompt from the name, before its first '_'.
  kT2iCompBench,
  /// DPG-Bench (TencentQQGYLab/ELLA, dpg_bench/compute_dpg_bench.py): the 4 images of a prompt in
  /// OUT/samples/<id>_<j>.png, and their 2x2 grid, which the script crops, in OUT/grids/<id>.png
  /// (rank 0 makes each grid once its 4 images are there); <id> its line's id, else its 5-digit place.
  kDpgBench,
  /// WebDataset shards (worker/shard_writer.h): OUT/<key>.tar holding <key>.<ext>, <key>.txt and
  /// <key>.json per item; item_file_name() is the image's member name in its shard.
  kWebDataset,
};

/// flat, geneval, t2i-compbench, dpg or webdataset; throws UsageError naming --layout otherwise.
Layout parse_layout(const std::string& name);
std::string to_string(Layout layout);

/// Everything that decides an item's file name.
struct OutputLayout {
  Layout layout = Layout::kFlat;
  ImageFormat format = ImageFormat::kPng;
  int64_t files_per_dir = 0;  ///< kFlat only
};

/// The item's image, relative to --out, in `layout` (the index-based names above for kFlat).
std::string item_file_name(const Item& item, const OutputLayout& layout);

/// The name DPG-Bench knows item's prompt by: its line's id, else its place, 5 digits.
std::string dpg_bench_name(const Item& item);

/// Why `name` cannot name a file ("" when it can): empty, '.', '..', a '/' or a NUL, or too long.
std::string file_name_problem(const std::string& name);

/// Why `prompt` cannot name a T2I-CompBench file ("" when it can): the scripts cut the name at
/// its first '_', a '/' would make a directory, and a name holds at most 255 bytes.
std::string t2i_compbench_name_problem(const std::string& prompt);

/// The layout whose item_file_name() `file_name` has the form of: samples/<prompt>_<6+ digits> is
/// T2I-CompBench's, samples/<id>_<j> DPG-Bench's, <k>/samples/... GenEval's, <key>.tar (a shard, as
/// records name it) WebDataset's; anything else flat.
Layout layout_of_file_name(const std::string& file_name);

/// True for a subdirectory name that a layout makes: --files-per-dir's and GenEval's numbered ones
/// (is_item_dir_name), "samples", and DPG-Bench's "grids". Only these are searched for stale temporaries.
bool is_layout_dir_name(const std::string& name);

/// True for a subdirectory name item_file_name() makes: 5 or more decimal digits. Only these are
/// searched for dpinfer's stale temporaries; other trees under --out are the user's.
bool is_item_dir_name(const std::string& name);

}  // namespace dpinfer::plan

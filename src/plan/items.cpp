#include "dpinfer/plan/items.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>
#include <unordered_map>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {

SeedFrom parse_seed_from(const std::string& name) {
  if (name == "index") return SeedFrom::kIndex;
  if (name == "prompt") return SeedFrom::kPrompt;
  throw UsageError("--seed-from: expected index or prompt, got " + quote(name, 60));
}

std::string to_string(SeedFrom from) { return from == SeedFrom::kPrompt ? "prompt" : "index"; }

uint64_t prompt_seed_hash(std::string_view prompt, int64_t occurrence) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto add = [&h](unsigned char b) { h = (h ^ b) * 0x100000001b3ULL; };
  for (char c : prompt) add(static_cast<unsigned char>(c));
  add(0);
  for (char c : std::to_string(occurrence)) add(static_cast<unsigned char>(c));
  return h & 0x7FFFFFFFFFFFFFFFULL;
}

ItemList::ItemList(std::vector<io::PromptSpec> specs, ItemDefaults defaults)
    : specs_(std::move(specs)), defaults_(std::move(defaults)) {
  first_.reserve(specs_.size());
  std::unordered_map<std::string_view, int64_t> seen;  // kPrompt: items so far per prompt text
  if (defaults_.seed_from == SeedFrom::kPrompt) occurrence_.reserve(specs_.size());
  for (const io::PromptSpec& s : specs_) {
    first_.push_back(total_);
    const int images = s.num_images.value_or(defaults_.num_images);
    if (images < 1 || images > kMaxItems - total_)
      throw InputError("the prompts file gives more than " + std::to_string(kMaxItems) + " images (at line " +
                       std::to_string(s.line) + "); split it into several files");
    if (s.seed && *s.seed > std::numeric_limits<int64_t>::max() - (images - 1))  // image j gets seed + j
      throw InputError("line " + std::to_string(s.line) + ": 'seed' " + std::to_string(*s.seed) + " + " +
                       std::to_string(images) + " images (--num-images) passes 2^63-1; lower the seed");
    total_ += images;
    if (defaults_.seed_from == SeedFrom::kPrompt) {
      int64_t& n = seen[s.prompt];
      occurrence_.push_back(n);
      n += images;
    } else if (const int64_t max = std::numeric_limits<int64_t>::max(); !s.seed && defaults_.seed > max - (total_ - 1)) {
      // The first item whose seed + index passes 2^63-1.
      const int64_t first_bad = std::max(first_.back(), max - defaults_.seed + 1);
      throw InputError("--seed " + std::to_string(defaults_.seed) + ": item " + std::to_string(first_bad) +
                       " would get a seed past 2^63-1 (seed + item index); lower --seed");
    }
  }
}

size_t ItemList::spec_of(int64_t index) const {
  if (index < 0 || index >= total_)
    throw std::out_of_range("item " + std::to_string(index) + " of " + std::to_string(total_));
  return static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), index) - first_.begin()) - 1;
}

const std::string& ItemList::prompt_of(int64_t index) const { return specs_[spec_of(index)].prompt; }

Item ItemList::at(int64_t index) const {
  const size_t k = spec_of(index);
  const io::PromptSpec& s = specs_[k];
  const ItemDefaults& d = defaults_;
  Item it;
  it.index = index;
  it.line = s.line;
  it.prompt_index = static_cast<int64_t>(k);
  it.image = static_cast<int>(index - first_[k]);
  it.prompt = s.prompt;
  it.negative_prompt = s.negative_prompt.value_or(d.negative_prompt);
  it.seed_from = d.seed_from;
  if (s.seed) {
    it.seed = *s.seed + it.image;  // the constructor kept seed + images - 1 below 2^63
  } else if (d.seed_from == SeedFrom::kPrompt) {
    // Both terms are below 2^63, so their sum fits in a uint64_t.
    const uint64_t h = prompt_seed_hash(s.prompt, occurrence_[k] + it.image);
    it.seed = static_cast<int64_t>((static_cast<uint64_t>(d.seed) + h) & 0x7FFFFFFFFFFFFFFFULL);
  } else {
    it.seed = d.seed + index;  // the constructor checked it stays below 2^63
  }
  it.steps = s.steps.value_or(d.steps);
  it.guidance_scale = s.guidance_scale.value_or(d.guidance_scale);
  it.width = s.width.value_or(d.width);
  it.height = s.height.value_or(d.height);
  it.id = s.id;
  it.settings = d.settings;
  if (s.settings) it.settings.update(*s.settings);
  it.loras = s.loras ? *s.loras : d.loras;
  it.fields = s.fields;
  it.image_path = s.image.value_or(d.image);
  it.more_image_paths = s.more_images;
  if (!it.image_path.empty()) {
    it.mask_path = s.mask.value_or(d.mask);
    it.strength = s.strength.value_or(it.mask_path.empty() ? d.strength : d.inpaint_strength);
  }
  return it;
}

namespace {

/// One row per image format: its --image-format name, file extension and label.
struct ImageFormatRow {
  ImageFormat format;
  const char* name;
  const char* extension;
  const char* label;
};
constexpr ImageFormatRow kImageFormats[] = {
    {ImageFormat::kPng, "png", "png", "PNG"},
    {ImageFormat::kJpeg, "jpeg", "jpg", "JPEG"},
    {ImageFormat::kWebp, "webp", "webp", "WebP"},
};

const ImageFormatRow& row_of(ImageFormat format) {
  for (const ImageFormatRow& r : kImageFormats)
    if (r.format == format) return r;
  return kImageFormats[0];
}

/// Each --layout's name.
constexpr std::pair<Layout, const char*> kLayouts[] = {{Layout::kFlat, "flat"},
                                                       {Layout::kGeneval, "geneval"},
                                                       {Layout::kT2iCompBench, "t2i-compbench"},
                                                       {Layout::kDpgBench, "dpg"},
                                                       {Layout::kWebDataset, "webdataset"}};

}  // namespace

ImageFormat parse_image_format(const std::string& name) {
  if (name == "jpg") return ImageFormat::kJpeg;
  for (const ImageFormatRow& r : kImageFormats)
    if (name == r.name) return r.format;
  throw UsageError("--image-format: expected png, jpeg or webp, got " + quote(name, 60));
}

std::string to_string(ImageFormat format) { return row_of(format).name; }

std::string label_of(ImageFormat format) { return row_of(format).label; }

std::optional<ImageFormat> image_format_of_file_name(const std::string& file_name) {
  const size_t dot = file_name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  for (const ImageFormatRow& r : kImageFormats)
    if (file_name.compare(dot + 1, std::string::npos, r.extension) == 0) return r.format;
  return std::nullopt;
}

std::string item_file_name(int64_t index, ImageFormat format, int64_t files_per_dir) {
  const char* extension = row_of(format).extension;
  char buf[64];
  if (files_per_dir > 0)
    std::snprintf(buf, sizeof buf, "%05lld/%06lld.%s", static_cast<long long>(index / files_per_dir),
                  static_cast<long long>(index), extension);
  else
    std::snprintf(buf, sizeof buf, "%06lld.%s", static_cast<long long>(index), extension);
  return buf;
}

Layout parse_layout(const std::string& name) {
  for (const auto& [layout, layout_name] : kLayouts)
    if (name == layout_name) return layout;
  throw UsageError("--layout: expected flat, geneval, t2i-compbench, dpg or webdataset, got " + quote(name, 60));
}

std::string to_string(Layout layout) {
  for (const auto& [l, name] : kLayouts)
    if (l == layout) return name;
  return "flat";
}

std::string item_file_name(const Item& item, const OutputLayout& layout) {
  const std::string extension = row_of(layout.format).extension;
  char buf[64];
  switch (layout.layout) {
    case Layout::kGeneval:
      std::snprintf(buf, sizeof buf, "%05lld/samples/%05d.%s", static_cast<long long>(item.prompt_index), item.image,
                    extension.c_str());
      return buf;
    case Layout::kT2iCompBench:
      std::snprintf(buf, sizeof buf, "_%06lld.%s", static_cast<long long>(item.index), extension.c_str());
      return "samples/" + item.prompt + buf;
    case Layout::kDpgBench:
      return "samples/" + dpg_bench_name(item) + "_" + std::to_string(item.image) + "." + extension;
    case Layout::kWebDataset:
      std::snprintf(buf, sizeof buf, "%09lld.%s", static_cast<long long>(item.index), extension.c_str());
      return buf;
    default:
      return item_file_name(item.index, layout.format, layout.files_per_dir);
  }
}

std::string dpg_bench_name(const Item& item) {
  if (item.id) return *item.id;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05lld", static_cast<long long>(item.prompt_index));
  return buf;
}

std::string file_name_problem(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "'.' and '..' name no file";
  if (name.find('/') != std::string::npos) return "it holds a '/'";
  if (name.find('\0') != std::string::npos) return "it holds a NUL";
  if (name.size() > 240) return "it is too long for a file name";
  return "";
}

std::string t2i_compbench_name_problem(const std::string& prompt) {
  if (prompt.empty()) return "an empty prompt names no file";
  if (prompt.find('_') != std::string::npos)
    return "it holds a '_', and T2I-CompBench's scripts take the prompt from the file name up to its first '_'";
  if (prompt.find('/') != std::string::npos) return "it holds a '/', which a file name cannot";
  if (prompt == "." || prompt == "..") return "'.' and '..' name no file";
  if (prompt.size() + 16 > 255) return "it is too long for a file name (255 bytes with '_NNNNNN.webp')";
  return "";
}

Layout layout_of_file_name(const std::string& name) {
  if (name.rfind("samples/", 0) == 0) {  // <prompt>_<index, 6+ digits>.<ext> or <id>_<j, one digit>.<ext>
    const size_t underscore = name.rfind('_'), dot = name.rfind('.');
    const bool t2i = underscore != std::string::npos && dot != std::string::npos && dot > underscore + 6;
    return t2i ? Layout::kT2iCompBench : Layout::kDpgBench;
  }
  if (name.find("/samples/") != std::string::npos) return Layout::kGeneval;
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0) return Layout::kWebDataset;
  return Layout::kFlat;
}

bool is_layout_dir_name(const std::string& name) {
  return is_item_dir_name(name) || name == "samples" || name == "grids";
}

bool is_item_dir_name(const std::string& name) {
  return name.size() >= 5 && name.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace dpinfer::plan

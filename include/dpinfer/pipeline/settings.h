#pragma once
// A model family's settings: the knobs beyond prompt, seed, steps, guidance and size that
// change an image (SD's clip_skip and guidance_rescale, later max_sequence_length or
// true_cfg_scale). Each family declares them as data (families/family_spec.h); they travel
// from the command line, --config and each JSONL line to the pipeline, into every
// image's record and infotext, and into resume's identity check, without the worker
// knowing any of them by name. Free of LibTorch: the worker's side of the seam.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// One setting of a family.
struct SettingSpec {
  /// kIntegerList: a JSON array of integers, each within min..max (SD3's skip_guidance_layers);
  /// --set takes it as JSON, e.g. skip_guidance_layers=[7,8,9].
  enum class Type { kInteger, kNumber, kBoolean, kIntegerList };

  std::string name;               ///< "clip_skip": the --set key, the JSONL key and the record field
  Type type = Type::kNumber;
  nlohmann::json default_value;   ///< also what a record that lacks the field stands for
  double min = 0;                 ///< inclusive bounds of a number or integer
  double max = 0;
  std::string help;               ///< one line for `--help` and the README
  /// AUTOMATIC1111's infotext label ("Clip skip"), or empty when the infotext leaves it out.
  std::string infotext_label;
  /// Added to the value in the infotext: AUTOMATIC1111 counts CLIP layers from 1, so its
  /// "Clip skip: 2" is diffusers' clip_skip=1.
  int infotext_offset = 0;
};

/// The spec called `name` in `specs`, or nullptr.
const SettingSpec* find_spec(const std::vector<SettingSpec>& specs, const std::string& name);

/// `given` (an object of setting values, from `where`: "--set", "'p.jsonl' line 3") checked
/// against `specs` and completed with their defaults, as an object in `specs` order. Throws
/// InputError naming `where`, the key and the family (`family_label`) for an unknown key, a
/// value of the wrong type, or one out of range.
nlohmann::json resolve_settings(const std::vector<SettingSpec>& specs, const nlohmann::json& given,
                                const std::string& where, const std::string& family_label);

/// ", Clip skip: 2, CFG Rescale: 0.7": the infotext parts of the settings that differ from
/// their defaults and have a label, each after ", ".
std::string settings_infotext(const std::vector<SettingSpec>& specs, const nlohmann::json& settings);

/// The names of `specs`, comma-separated, for messages.
std::string setting_names(const std::vector<SettingSpec>& specs);

}  // namespace dpinfer::pipeline

#include "dpinfer/worker/image_metadata.h"

#include <fmt/format.h>

namespace dpinfer::worker {

std::string a1111_infotext(const plan::Item& item, const pipeline::PipelineInfo& info) {
  std::string s = item.prompt;
  if (!item.negative_prompt.empty()) s += "\nNegative prompt: " + item.negative_prompt;
  s += fmt::format("\nSteps: {}, Sampler: {}, CFG scale: {:g}, Seed: {}, Size: {}x{}, Model: {}", item.steps,
                   info.sampler_label, item.guidance_scale, item.seed, item.width, item.height, info.model_name);
  return s + pipeline::settings_infotext(info.setting_specs, item.settings);
}

nlohmann::json item_record(const plan::Item& item, const pipeline::PipelineInfo& info) {
  nlohmann::json j = {{"index", item.index},
                      {"file_name", plan::item_file_name(item.index)},
                      {"prompt", item.prompt},
                      {"negative_prompt", item.negative_prompt},
                      {"seed", item.seed},
                      {"seed_from", plan::to_string(item.seed_from)},
                      {"steps", item.steps},
                      {"guidance_scale", item.guidance_scale},
                      {"width", item.width},
                      {"height", item.height},
                      {"scheduler", info.scheduler_name},
                      {"model", info.model_name},
                      {"line", item.line},
                      // Not "image": imagefolder names the picture column that (manifest.h).
                      {"image_index", item.image}};
  if (!info.model_revision.empty()) j["model_revision"] = info.model_revision;
  if (item.id) j["id"] = *item.id;
  nlohmann::json names = nlohmann::json::array();
  for (const pipeline::SettingSpec& spec : info.setting_specs) {
    j[spec.name] = item.settings.contains(spec.name) ? item.settings[spec.name] : spec.default_value;
    names.push_back(spec.name);
  }
  j["settings"] = names;
  return j;
}

std::vector<std::pair<std::string, nlohmann::json>> identity_fields(const pipeline::PipelineInfo& info) {
  std::vector<std::pair<std::string, nlohmann::json>> fields{
      {"prompt", nullptr}, {"negative_prompt", nullptr}, {"seed", nullptr},   {"steps", nullptr},
      {"guidance_scale", nullptr}, {"width", nullptr},   {"height", nullptr}, {"scheduler", nullptr},
      {"seed_from", "index"}};  // older records lack it: they were seeded by index, the only way then
  for (const pipeline::SettingSpec& spec : info.setting_specs) fields.emplace_back(spec.name, spec.default_value);
  return fields;
}

}  // namespace dpinfer::worker

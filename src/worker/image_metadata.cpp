#include "dpinfer/worker/image_metadata.h"

#include <fmt/format.h>

namespace dpinfer::worker {

std::string a1111_infotext(const plan::Item& item, const pipeline::PipelineInfo& info) {
  std::string s = item.prompt;
  if (!item.negative_prompt.empty()) s += "\nNegative prompt: " + item.negative_prompt;
  s += fmt::format("\nSteps: {}, Sampler: {}, CFG scale: {:g}, Seed: {}, Size: {}x{}, Model: {}", item.steps,
                   info.sampler_label, item.guidance_scale, item.seed, item.width, item.height, info.model_name);
  // AUTOMATIC1111 counts the last layer too: its "Clip skip: 2" is diffusers' clip_skip=1.
  if (info.clip_skip > 0) s += fmt::format(", Clip skip: {}", info.clip_skip + 1);
  return s;
}

nlohmann::json item_record(const plan::Item& item, const pipeline::PipelineInfo& info) {
  nlohmann::json j = {{"index", item.index},
                      {"file_name", plan::item_file_name(item.index)},
                      {"prompt", item.prompt},
                      {"negative_prompt", item.negative_prompt},
                      {"seed", item.seed},
                      {"steps", item.steps},
                      {"guidance_scale", item.guidance_scale},
                      {"width", item.width},
                      {"height", item.height},
                      {"scheduler", info.scheduler_name},
                      {"clip_skip", info.clip_skip},
                      {"guidance_rescale", info.guidance_rescale},
                      {"model", info.model_name},
                      {"line", item.line},
                      // Not "image": imagefolder names the picture column that (manifest.h).
                      {"image_index", item.image}};
  if (item.id) j["id"] = *item.id;
  return j;
}

}  // namespace dpinfer::worker

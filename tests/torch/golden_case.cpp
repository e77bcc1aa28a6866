#include "torch/golden_case.h"

#include <array>
#include <fstream>
#include <stdexcept>
#include <string>

#include "dpinfer/worker/input_images.h"

namespace dpinfer::test {
namespace {

using nlohmann::json;

/// A prompt argument for `n` prompts: None (""), one string for all, or a list.
std::vector<std::string> as_list(const json& v, size_t n) {
  if (v.is_null()) return std::vector<std::string>(n, "");
  if (v.is_string()) return std::vector<std::string>(n, v.get<std::string>());
  return v.get<std::vector<std::string>>();
}

}  // namespace

std::vector<pipeline::ImageRequest> golden_case_requests(const json& c, const pipeline::TextToImage* pipe) {
  const json& call = c["call"];
  const json* asked = c.contains("dpinfer") ? &c["dpinfer"] : nullptr;
  const json settings =
      asked ? (*asked)["settings"]
      : c.contains("settings")
          ? c["settings"]
          : json{{"clip_skip", call["clip_skip"].is_null() ? 0 : call["clip_skip"].get<int>()},
                 {"guidance_rescale", call["guidance_rescale"].get<double>()},
                 {"eta", call["eta"].get<double>()}};
  const double guidance_scale = asked ? (*asked)["guidance_scale"].get<double>() : call["guidance_scale"].get<double>();
  const json& seeds = c["generator"]["seeds"];
  const size_t n_prompts = call["prompt"].is_array() ? call["prompt"].size() : 1;
  const std::vector<std::string> prompts = as_list(call["prompt"], n_prompts);
  const std::vector<std::string> negatives = as_list(call["negative_prompt"], n_prompts);
  std::vector<pipeline::ImageRequest> batch;
  for (size_t p = 0; p < n_prompts; ++p)
    for (int j = 0; j < call["num_images_per_prompt"].get<int>(); ++j) {
      pipeline::ImageRequest r;
      r.prompt = prompts[p];
      r.negative_prompt = negatives[p];
      r.seed = seeds.at(batch.size()).get<uint64_t>();
      r.steps = call["num_inference_steps"].get<int>();
      r.guidance_scale = guidance_scale;
      r.height = c["resolved_height"].get<int>();
      r.width = c["resolved_width"].get<int>();
      r.settings = settings;
      if (c.contains("input_images")) {
        // img2img (make_img2img_pipelines.py): what the worker does, the file decoded and resized to the item's size.
        worker::InputImages images;
        r.image = images.load(
            std::string(DPINFER_TEST_DATA_DIR) + "/../../" + c["input_images"].at(batch.size()).get<std::string>(),
            r.width, r.height);
        r.strength = c["strength"].get<double>();
      }
      if (c.contains("reference_images")) {
        // FLUX.1 Kontext and FLUX.2: what the worker does, each file sized as the pipeline's reference_size() of its
        // own size says. An entry is a path, or a list of paths (FLUX.2's several references, in order).
        if (!pipe) throw std::runtime_error("a reference-image case needs its pipeline");
        const json& files = c["reference_images"].at(batch.size());
        const json& sizes = c["reference_sizes"].at(batch.size());
        const bool several = files.is_array();
        for (size_t k = 0; k < (several ? files.size() : 1); ++k) {
          const json& recorded = several ? sizes.at(k) : sizes;
          worker::InputImages references;
          auto image = references.load(
              std::string(DPINFER_TEST_DATA_DIR) + "/../../" + (several ? files.at(k) : files).get<std::string>(),
              [&](int width, int height) {
                const pipeline::ReferenceSize size = pipe->reference_size(width, height, settings);
                if (size.size[0] != recorded[0].get<int>() || size.size[1] != recorded[1].get<int>())
                  throw std::runtime_error("reference size " + std::to_string(size.size[0]) + "x" +
                                           std::to_string(size.size[1]) + ", diffusers made it " + recorded.dump());
                return size;
              });
          if (k == 0) r.image = std::move(image);
          else r.more_images.push_back(std::move(image));
        }
      }
      if (c.contains("input_masks")) {
        // Inpainting (make_inpaint_pipelines.py): the mask as the worker reads it (grayscale, resized).
        worker::InputImages masks;
        r.mask = masks.load_mask(std::string(DPINFER_TEST_DATA_DIR) + "/../../" +
                                     c["input_masks"].at(batch.size()).get<std::string>(),
                                 r.width, r.height);
      }
      // LoRAs (make_lora_storage_fixtures.py): [[path under the repository, scale], ...], as --lora takes them.
      if (c.contains("loras"))
        for (const json& l : c["loras"])
          r.loras.push_back({std::string(DPINFER_TEST_DATA_DIR) + "/../../" + l[0].get<std::string>(), l[1].get<double>()});
      batch.push_back(r);
    }
  return batch;
}

json golden_cases_doc(const std::string& fixture) {
  const size_t slash = fixture.find('/');
  const std::string name = fixture.substr(0, slash);
  const std::string sub = slash == std::string::npos ? "" : "/" + fixture.substr(slash + 1);
  const std::string path = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/" + name + ".golden" + sub + "/cases.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

std::string golden_model_dir(const json& doc) {
  return std::string(DPINFER_TEST_DATA_DIR) + "/../../" + doc["model_dir"].get<std::string>();
}

std::vector<std::vector<pipeline::ImageRequest>> golden_batches(const json& doc, size_t limit,
                                                                const pipeline::TextToImage* pipe) {
  std::vector<std::vector<pipeline::ImageRequest>> batches;
  for (const json& c : doc["cases"]) {
    if (batches.size() == limit) break;
    if (c.contains("optional_feature") || !c["scheduler"]["is_pipeline_default"].get<bool>() ||
        c.value("dtype", std::string("fp32")) != "fp32")
      continue;
    batches.push_back(golden_case_requests(c, pipe));
  }
  return batches;
}

}  // namespace dpinfer::test

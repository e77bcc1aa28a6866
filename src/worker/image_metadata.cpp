#include "dpinfer/worker/image_metadata.h"

#include <fmt/format.h>

#include "dpinfer/io/lora_ref.h"

namespace dpinfer::worker {

namespace {

/// A1111's quote() of an infotext value (modules/infotext_utils.py): a value with a comma, a
/// colon or a newline is written as a JSON string (json.dumps(text, ensure_ascii=False)).
std::string a1111_quote(const std::string& text) {
  if (text.find_first_of(",:\n") == std::string::npos) return text;
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string a1111_infotext(const plan::Item& item, const pipeline::PipelineInfo& info, const RunHashes* hashes) {
  // The LoRAs as A1111's prompt syntax, after the prompt (extensions-builtin/Lora: <lora:name:multiplier>).
  std::string s = item.prompt;
  if (!item.loras.empty()) s += (s.empty() ? "" : " ") + io::lora_set_text(item.loras);
  if (!item.negative_prompt.empty()) s += "\nNegative prompt: " + item.negative_prompt;
  s += fmt::format("\nSteps: {}, Sampler: {}, CFG scale: {:g}, Seed: {}, Size: {}x{}, ", item.steps,
                   info.sampler_label, item.guidance_scale, item.seed, item.width, item.height);
  if (hashes && !hashes->model.empty()) s += "Model hash: " + model_short_hash(hashes->model) + ", ";
  s += "Model: " + info.model_name;
  if (!info.weight_storage.empty()) s += ", Weight storage: " + info.weight_storage;
  if (!info.fp8_compute.empty()) s += ", FP8 compute: " + info.fp8_compute;
  // A1111's img2img key, and the input's hash (the short form of the record's).
  // A reference image (FLUX.1 Kontext) has no strength.
  if (!item.image_path.empty() && !info.image_is_reference) s += fmt::format(", Denoising strength: {:g}", item.strength);
  if (!item.image_path.empty()) {
    // Several references (FLUX.2): their short hashes in order, quoted as one value.
    std::string image_hashes = item.image_sha256.substr(0, 10);
    for (const std::string& hash : item.more_image_sha256) image_hashes += ", " + hash.substr(0, 10);
    s += ", Input image hash: " + (item.more_image_sha256.empty() ? image_hashes : a1111_quote(image_hashes));
  }
  if (!item.mask_path.empty()) s += ", Mask hash: " + item.mask_sha256.substr(0, 10);
  s += pipeline::settings_infotext(info.setting_specs, item.settings);
  // extensions-builtin/Lora/extra_networks_lora.py: "alias: shorthash" joined by ", ", the alias
  // without ':' or ','; the whole value then quoted.
  std::string lora_hashes;
  for (const io::LoraRef& ref : item.loras) {
    if (!hashes) break;
    auto it = hashes->loras.find(ref.path);
    if (it == hashes->loras.end()) continue;
    std::string alias;
    for (char c : io::lora_name(ref.path))
      if (c != ':' && c != ',') alias += c;
    lora_hashes += (lora_hashes.empty() ? "" : ", ") + alias + ": " + lora_short_hash(it->second);
  }
  if (!lora_hashes.empty()) s += ", Lora hashes: " + a1111_quote(lora_hashes);
  return s;
}

nlohmann::json item_record(const plan::Item& item, const pipeline::PipelineInfo& info, const RunHashes* hashes,
                           const plan::OutputLayout& layout) {
  nlohmann::json j = {{"index", item.index},
                      {"file_name", plan::item_file_name(item, layout)},
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
  // Only when set: a record without it was made with the model's own scheduler config.
  if (!info.scheduler_settings.empty()) j["scheduler_settings"] = info.scheduler_settings;
  // The run dtype changes pixels too: an fp32 image is not its bf16 twin.
  j["dtype"] = info.dtype;
  // Only when it changes pixels: a record without it was made with the weights in the run dtype.
  if (!info.weight_storage.empty()) j["weight_storage"] = info.weight_storage;
  // Only when on: a record without it was decoded whole.
  if (info.vae_tiling) j["vae_tiling"] = true;
  // Only when not "auto" / when on: other kernels round differently (on a GPU; on the CPU the pixels
  // of math and auto differ by rounding too), so they are part of what an image is.
  if (!info.attention_backend.empty()) j["attention_backend"] = info.attention_backend;
  if (info.channels_last) j["channels_last"] = true;
  // Only when on: the blocks' matrix products in float8 give other pixels.
  if (!info.fp8_compute.empty()) j["fp8_compute"] = info.fp8_compute;
  // Only for an item that starts from an image: its path, its SHA-256 (resume compares it, so a
  // changed input is another item) and its strength.
  if (!item.image_path.empty()) {
    j["input_image"] = item.image_path;
    j["input_image_hash"] = item.image_sha256;
    if (!item.more_image_paths.empty()) {
      // Several references (FLUX.2): lists in order, as the line's `image` lists them.
      j["input_image"] = nlohmann::json::array({item.image_path});
      j["input_image_hash"] = nlohmann::json::array({item.image_sha256});
      for (size_t k = 0; k < item.more_image_paths.size(); ++k) {
        j["input_image"].push_back(item.more_image_paths[k]);
        j["input_image_hash"].push_back(k < item.more_image_sha256.size() ? item.more_image_sha256[k] : "");
      }
    }
    if (!info.image_is_reference) j["strength"] = item.strength;  // a reference (FLUX.1 Kontext) has none
  }
  if (!item.mask_path.empty()) {
    j["input_mask"] = item.mask_path;
    j["input_mask_hash"] = item.mask_sha256;
  }
  if (!info.model_revision.empty()) j["model_revision"] = info.model_revision;
  if (hashes && !hashes->model.empty()) j["model_hash"] = model_short_hash(hashes->model);
  // What the item is made with: each LoRA's name, scale and hash (resume compares them), and
  // apart, where the files were.
  nlohmann::json loras = nlohmann::json::array(), lora_paths = nlohmann::json::array();
  for (const io::LoraRef& ref : item.loras) {
    nlohmann::json l = {{"name", io::lora_name(ref.path)}, {"scale", ref.scale}};
    if (hashes) {
      auto it = hashes->loras.find(ref.path);
      l["hash"] = it == hashes->loras.end() ? std::string() : lora_short_hash(it->second);
    }
    loras.push_back(std::move(l));
    lora_paths.push_back(ref.path);
  }
  j["loras"] = loras;
  if (!item.loras.empty()) j["lora_paths"] = lora_paths;
  if (item.id) j["id"] = *item.id;
  nlohmann::json names = nlohmann::json::array();
  for (const pipeline::SettingSpec& spec : info.setting_specs) {
    j[spec.name] = item.settings.contains(spec.name) ? item.settings[spec.name] : spec.default_value;
    names.push_back(spec.name);
  }
  j["settings"] = names;
  // --keep-fields: the line's own fields, as written; none has a record key's name
  // (plan/record_fields.h, and the settings' names: GenerateRun checks them once loaded).
  for (const auto& [key, value] : item.fields.items()) j[key] = value;
  return j;
}

std::vector<std::pair<std::string, nlohmann::json>> identity_fields(const pipeline::PipelineInfo& info) {
  std::vector<std::pair<std::string, nlohmann::json>> fields{
      {"prompt", nullptr}, {"negative_prompt", nullptr}, {"seed", nullptr},   {"steps", nullptr},
      {"guidance_scale", nullptr}, {"width", nullptr},   {"height", nullptr}, {"scheduler", nullptr},
      {"seed_from", "index"},  // older records lack it: they were seeded by index, the only way then
      {"scheduler_settings", nlohmann::json::object()},  // absent: none set
      {"vae_tiling", false},  // absent: decoded whole (tiling blends other pixels)
      {"loras", nlohmann::json::array()},  // older records lack it: no LoRA then
      {"weight_storage", "default"},  // absent: the weights in the run dtype
      {"attention_backend", "auto"},  // absent: LibTorch's own choice per call
      {"channels_last", false},  // absent: contiguous (NCHW) convolutions
      {"fp8_compute", "off"},  // absent: the run dtype's matrix products
      {"input_image_hash", nullptr},  // absent: text-to-image
      {"strength", nullptr},
      {"input_mask_hash", nullptr},  // absent: no mask
      {"dtype", nullptr}};  // every made image's record has it
  for (const pipeline::SettingSpec& spec : info.setting_specs) fields.emplace_back(spec.name, spec.default_value);
  return fields;
}

}  // namespace dpinfer::worker

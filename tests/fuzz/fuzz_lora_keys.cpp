// libFuzzer: the LoRA key conversion (pipeline/loading/lora_keys.h) on the keys and shapes of a
// safetensors file of arbitrary bytes, framed as fuzz_safetensors frames it (first byte odd:
// the rest is a JSON header, given its 8-byte length and data[1] & 63 zero bytes of data), against
// a small SDXL-like module table (layers_per_block 2), then against a small transformer table with each
// DiT family's key rules (flux_lora_rules, ...), then against a FLUX.1-like double and single block with
// FLUX.1's (kohya / BFL names, lora_flux_keys.h; diffusers' underscored names, lora_flux_mixture_keys.h;
// XLabs, lora_flux_xlabs_keys.h). What map_lora_keys() returns must name a module of the
// table; a layer's part of a fused layer (up_rows) must be as many rows as its module's weight has and
// lie inside the up factor's; a DoRA magnitude must be a key of the file of its weight's row count (never a
// kohya dora_scale, which diffusers drops); the nearest spelling (lora_nearest_spelling.h) is named for any key;
// anything else must be a one-line InputError.
#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/loading/lora_format.h"
#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/loading/lora_nearest_spelling.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("lora.safetensors");
  static const pipeline::LoraModuleTable modules = {
      {"unet",
       {{"down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q", {2, 2}},
        {"down_blocks.0.resnets.1.conv1", {2, 2, 3, 3}},
        {"down_blocks.0.downsamplers.0.conv", {2, 2, 3, 3}},
        {"mid_block.attentions.0.proj_in", {2, 2}},
        {"mid_block.resnets.1.time_emb_proj", {2, 4}},
        {"up_blocks.0.resnets.2.conv_shortcut", {2, 3, 1, 1}},
        {"up_blocks.1.upsamplers.0.conv", {2, 2, 3, 3}}}},
      {"text_encoder", {{"text_model.encoder.layers.0.self_attn.q_proj", {2, 2}}}},
      {"text_encoder_2", {{"text_model.encoder.layers.0.mlp.fc1", {3, 2}}}}};
  if (size < 2) return 0;
  std::string bytes;
  if (data[0] & 1) {
    const std::string header(reinterpret_cast<const char*>(data) + 2, size - 2);
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
    bytes += header;
    bytes.append(data[1] & 63, '\0');
  } else {
    bytes.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  }
  std::vector<pipeline::LoraTensorKey> keys;
  try {
    auto st = io::SafetensorsFile::open(file.write(bytes.data(), bytes.size()));
    for (const io::TensorView& t : st->tensors()) keys.push_back({t.name, t.shape});
  } catch (const Error& e) {
    fuzz::check_message(e.what());
    return 0;
  }
  // What `dpinfer inspect` says of the keys (lora_format.h): never throws, always names a format, and
  // counts only layers of rank >= 0 from a down factor's shape.
  {
    const pipeline::LoraNameFacts facts = pipeline::describe_lora_names(keys);
    if (facts.format.empty()) std::abort();
    for (const auto& [name, c] : facts.components)
      if (c.layers < 1 || c.min_rank > c.max_rank) std::abort();
    for (auto* rules_of : {pipeline::stable_diffusion_lora_rules, pipeline::flux_lora_rules,
                           pipeline::qwen_image_lora_rules, pipeline::stable_diffusion_3_lora_rules}) {
      const pipeline::LoraKeyRules rules = rules_of();
      if (pipeline::lora_format(keys, rules).empty()) std::abort();
      // The nearest spelling inspect names for a refused file (lora_nearest_spelling.h): one for any key.
      const pipeline::LoraNearestSpelling nearest = pipeline::nearest_lora_spelling(keys, rules);
      if (nearest.spelling.empty() != keys.empty() || nearest.differs.empty() != keys.empty()) std::abort();
    }
  }
  // The same keys against the UNet table with the UNet families' rules, and against a transformer
  // table with each DiT family's (Z-Image's: non-diffusers names, the "out" rename; FLUX.1's: refusals).
  const auto check = [&](const pipeline::LoraModuleTable& table, const pipeline::LoraModelFacts& facts) {
    try {
      const auto layers = pipeline::map_lora_keys(keys, table, facts, "lora.safetensors");
      if (layers.empty()) std::abort();  // none matching is an error, never an empty answer
      for (const pipeline::LoraLayer& l : layers) {
        auto component = table.find(l.component);
        if (component == table.end() || !component->second.count(l.module) || l.rank < 1) std::abort();
        if (l.magnitude_key) {  // DoRA: a key of the file, [out] for a Linear, [1, out, 1, 1] for a Conv2d
          const std::vector<int64_t>& w = component->second.at(l.module);
          const std::vector<int64_t> want = w.size() == 4 ? std::vector<int64_t>{1, w[0], 1, 1}
                                                          : std::vector<int64_t>{w[0]};
          bool found = false;
          for (const auto& k : keys) found = found || (k.key == *l.magnitude_key && k.shape == want);
          if (!found || l.magnitude_key->find("dora_scale") != std::string::npos) std::abort();
        }
        if (!l.up_rows) continue;
        const int64_t rows = component->second.at(l.module)[0];
        int64_t up_rows = -1;
        for (const auto& k : keys)
          if (k.key == l.up_key && k.shape.size() == 2) up_rows = k.shape[0];
        if (l.up_rows->end - l.up_rows->begin != rows || l.up_rows->begin < 0 || l.up_rows->end > up_rows ||
            l.part < 0 || l.part >= l.parts)
          std::abort();
      }
    } catch (const Error& e) {
      fuzz::check_message(e.what());
    }
  };
  check(modules, {"Stable Diffusion XL", 2, pipeline::stable_diffusion_xl_lora_rules()});
  check(modules, {"Stable Diffusion", 2, pipeline::stable_diffusion_lora_rules()});
  static const pipeline::LoraModuleTable dit = {
      {"transformer",
       {{"layers.0.attention.to_out.0", {2, 2}}, {"transformer_blocks.0.attn.to_q", {2, 2}}, {"x_embedder", {2, 4}}}},
      {"text_encoder", {{"text_model.encoder.layers.0.self_attn.q_proj", {2, 2}}}}};
  const std::pair<const char*, pipeline::LoraKeyRules (*)()> dits[] = {
      {"Z-Image", pipeline::z_image_lora_rules}, {"Qwen-Image", pipeline::qwen_image_lora_rules},
      {"FLUX.1", pipeline::flux_lora_rules}, {"Stable Diffusion 3", pipeline::stable_diffusion_3_lora_rules}};
  for (const auto& [label, rules] : dits) check(dit, {label, 2, rules()});
  static const pipeline::LoraModuleTable flux = {
      {"transformer",
       {{"transformer_blocks.0.attn.to_q", {2, 2}},
        {"transformer_blocks.0.attn.to_k", {2, 2}},
        {"transformer_blocks.0.attn.to_v", {2, 2}},
        {"transformer_blocks.0.attn.to_out.0", {2, 2}},
        {"single_transformer_blocks.0.attn.to_q", {2, 2}},
        {"single_transformer_blocks.0.attn.to_k", {2, 2}},
        {"single_transformer_blocks.0.attn.to_v", {2, 2}},
        {"single_transformer_blocks.0.proj_mlp", {4, 2}},
        {"single_transformer_blocks.0.proj_out", {2, 6}}}},
      {"text_encoder",
       {{"text_model.encoder.layers.0.self_attn.q_proj", {2, 2}},
        {"text_model.encoder.layers.0.self_attn.out_proj", {2, 2}},
        {"text_model.encoder.layers.0.mlp.fc1", {3, 2}}}}};
  check(flux, {"FLUX.1", 2, pipeline::flux_lora_rules()});
  // FLUX.2's BFL converter (lora_flux2_keys.h): a fused qkv split into thirds, a fused single-block projection.
  static const pipeline::LoraModuleTable flux2 = {
      {"transformer",
       {{"transformer_blocks.0.attn.to_q", {2, 2}},
        {"transformer_blocks.0.attn.to_k", {2, 2}},
        {"transformer_blocks.0.attn.to_v", {2, 2}},
        {"transformer_blocks.0.ff.linear_in", {4, 2}},
        {"single_transformer_blocks.0.attn.to_qkv_mlp_proj", {10, 2}},
        {"single_transformer_blocks.0.attn.to_out", {2, 4}},
        {"x_embedder", {2, 4}}}}};
  check(flux2, {"FLUX.2 [klein]", 2, pipeline::flux2_lora_rules()});
  return 0;
}

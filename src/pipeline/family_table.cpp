#include "dpinfer/pipeline/family_table.h"

#include <fmt/format.h>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// The LoRA formats a family reads, named as docs/lora.md names them, from its key rules.
std::vector<std::string> lora_formats(const LoraKeyRules& rules) {
  std::vector<std::string> formats{"diffusers / PEFT"};
  if (rules.kohya_unet) formats.insert(formats.end(), {"kohya / A1111", "LyCORIS LoCon"});
  if (rules.kohya_flux)
    formats.insert(formats.end(), {"kohya / ComfyUI (BFL block names)", "kohya (`lora_transformer_` names)", "XLabs"});
  if (rules.bfl_flux2) formats.push_back("ai-toolkit / ComfyUI (BFL block names)");
  if (rules.non_diffusers_transformer) formats.push_back("the transformer's original names");
  return formats;
}

struct SingleFileKind {
  std::string kind;
  std::string label;
  bool shipped_base;
};

std::vector<SingleFileKind> single_file_kinds_of(const Family& family) {
  std::vector<SingleFileKind> kinds;
  for (const std::string& kind : single_file_kinds()) {
    const std::string pipeline_class = single_file_pipeline_class(kind);
    bool served = false;
    for (const std::string& c : family.pipeline_classes) served = served || c == pipeline_class;
    if (!served) continue;
    kinds.push_back({kind, single_file_kind_label(kind), single_file_kind_has_shipped_base(kind)});
  }
  return kinds;
}

/// "7.5", "5.0": the shortest decimal that reads back as the value, with one decimal at least.
std::string number_text(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

/// What a class's references are, for people: "reference", "up to 16 references, required".
std::string references_text(const ReferenceFacts& refs) {
  std::string text = refs.several ? "up to " + std::to_string(io::kImagesPerItemRange.max) + " references" : "reference";
  if (refs.required) text += ", required";
  return text;
}

/// Whether every pipeline class of `family` takes references (FLUX.2), and which of its classes take references
/// where the others take img2img's start (FLUX.1 Kontext, Qwen-Image-Edit).
bool all_classes_take_references(const Family& family) {
  for (const std::string& c : family.pipeline_classes)
    if (!class_reference_facts(c).references) return false;
  return true;
}

/// What a family's items may start from, and the strengths they default to: "text; `image` (0.8); `mask` (1.0)",
/// "text; `image` (up to 16 references)", and a class's own where it takes references:
/// "...; `FluxKontextPipeline`: `image` (reference)".
std::string inputs_text(const Family& family) {
  std::string text = "text";
  if (all_classes_take_references(family))
    return text + "; `image` (" + references_text(class_reference_facts(family.pipeline_classes.front())) + ")";
  if (family.default_strength > 0) text += "; `image` (" + number_text(family.default_strength) + ")";
  if (family.default_inpaint_strength > 0) text += "; `mask` (" + number_text(family.default_inpaint_strength) + ")";
  for (const std::string& c : family.pipeline_classes) {
    const ReferenceFacts refs = class_reference_facts(c);
    if (refs.references) text += "; `" + c + "`: `image` (" + references_text(refs) + ")";
  }
  return text;
}

std::string code_list(const std::vector<std::string>& words) {
  std::vector<std::string> quoted;
  for (const std::string& w : words) quoted.push_back("`" + w + "`");
  return join(quoted);
}

}  // namespace

nlohmann::json families_json() {
  nlohmann::json rows = nlohmann::json::array();
  for (const Family& family : families()) {
    nlohmann::json settings = nlohmann::json::object();
    for (const SettingSpec& s : family.settings) settings[s.name] = s.default_value;
    const LoraKeyRules rules = family.lora_rules();
    nlohmann::json files = nlohmann::json::array();
    for (const SingleFileKind& k : single_file_kinds_of(family))
      files.push_back({{"kind", k.kind}, {"label", k.label}, {"shipped_base", k.shipped_base}});
    rows.push_back({{"family", family.name},
                    {"label", family.label},
                    {"pipeline_classes", family.pipeline_classes},
                    {"default_steps", family.default_steps},
                    {"default_guidance_scale", family.default_guidance_scale},
                    {"size_multiple", family.size_multiple},
                    {"settings", settings},
                    {"lora_components", rules.components},
                    {"lora_formats", rules.components.empty() ? std::vector<std::string>{} : lora_formats(rules)},
                    {"single_file_kinds", files}});
    // img2img and inpainting (issue 29): the default strength of an item with an image, with a mask; null when
    // the family takes none.
    nlohmann::json& row = rows.back();
    row["image_strength"] = family.default_strength > 0 ? nlohmann::json(family.default_strength) : nlohmann::json();
    row["mask_strength"] =
        family.default_inpaint_strength > 0 ? nlohmann::json(family.default_inpaint_strength) : nlohmann::json();
    // The classes whose images are references to edit (FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit), not img2img's start.
    nlohmann::json references = nlohmann::json::object();
    for (const std::string& c : family.pipeline_classes) {
      const ReferenceFacts refs = class_reference_facts(c);
      if (refs.references)
        references[c] = {{"several", refs.several}, {"required", refs.required}, {"sets_item_size", refs.sets_item_size},
                         {"prompt_reads", refs.prompt_reads}};
    }
    row["references"] = references;
  }
  return rows;
}

std::string families_markdown() {
  std::string out =
      "| family | pipeline classes | steps, guidance | size multiple | inputs (default strength) | settings (default) | "
      "LoRA: components; formats | single files (kind) |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const Family& family : families()) {
    std::vector<std::string> settings;
    for (const SettingSpec& s : family.settings) settings.push_back("`" + s.name + "` (" + s.default_value.dump() + ")");
    const LoraKeyRules rules = family.lora_rules();
    std::vector<std::string> files;
    for (const SingleFileKind& k : single_file_kinds_of(family))
      files.push_back(k.label + " (`" + k.kind + "`" + (k.shipped_base ? "" : ", needs `--base`") + ")");
    // Each family's page is docs/models/<name>.md (the links test checks that it exists).
    const std::string lora =
        rules.components.empty() ? "none" : code_list(rules.components) + "; " + join(lora_formats(rules));
    out += fmt::format("| [{}](docs/models/{}.md) (`{}`) | {} | {}, {} | {} | {} | {} | {} | {} |\n", family.label,
                       family.name, family.name, code_list(family.pipeline_classes), family.default_steps,
                       number_text(family.default_guidance_scale), family.size_multiple, inputs_text(family),
                       join(settings), lora, files.empty() ? "none" : join(files));
  }
  return out;
}

}  // namespace dpinfer::pipeline

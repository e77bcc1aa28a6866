#include "dpinfer/pipeline/single_file/single_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/gguf_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/gguf_storage.h"
#include "dpinfer/pipeline/single_file/dit_detection.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/strings.h"
#include "single_file_kinds.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;

using single_file_table::ComponentSlot;
using single_file_table::ConfigFacts;
using single_file_table::Kind;

bool has_prefix(const std::vector<SourceTensor>& tensors, const std::string& prefix) {
  return std::any_of(tensors.begin(), tensors.end(), [&](const SourceTensor& t) { return starts_with(t.name, prefix); });
}

/// A family's weights and configs from a diffusers directory (the --vae / --text-encoder folders).
void take_folder(Component& c, const std::string& folder, const std::string& option) {
  std::error_code ec;
  const fs::path dir = fs::absolute(folder, ec);
  if (!fs::is_directory(dir, ec))
    throw InputError(option + " " + quote(folder) + ": expected a diffusers/transformers component folder (config.json "
                     "and its safetensors weights), e.g. a vae/ or text_encoder/ folder");
  const fs::path config = dir / "config.json";
  if (!file_exists(config.string()))
    throw InputError(option + " " + quote(folder) + " has no config.json; give the component's folder");
  c.config = io::read_json_object_file(config.string());
  c.path = dir.string();
  c.source = option + " " + dir.string();
  find_weight_files(c.path);  // its weights must be there (throws naming the folder)
}

/// Whether a base component folder has weights of its own.
bool has_weight_files(const std::string& dir) {
  try {
    find_weight_files(dir);
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// A DiT transformer file's architecture against its config: the shipped default's config is made
/// the file's (diffusers takes these from the Hub's config; a fine-tune may change them), a --base
/// config must agree with it (one line naming both otherwise).
void fit_config(Component& c, const ConfigFacts& facts, bool shipped, const std::string& where,
                const std::string& base) {
  if (shipped) {
    for (const auto& [field, value] : facts) c.config[field] = value;
    return;
  }
  bool agree = true;
  std::string file_says, base_says;
  for (const auto& [field, value] : facts) {
    if (!c.config.contains(field)) continue;  // the class default; the strict key check still applies
    const nlohmann::json& given = c.config[field];
    agree = agree && given == value;
    file_says += (file_says.empty() ? "" : ", ") + field + " " + value.dump();
    base_says += (base_says.empty() ? "" : ", ") + field + " " + printable(given.dump(), 40);
  }
  if (!agree)
    throw InputError(where + "'s keys say " + file_says + " but --base " + quote(base) + "'s transformer config has " +
                     base_says + "; give the base the file belongs to");
}

}  // namespace

std::string shipped_config_dir(const std::string& kind) {
  std::vector<std::string> candidates;
  if (const char* data = std::getenv("DPINFER_DATA_DIR"); data != nullptr && *data != '\0')
    candidates.push_back(std::string(data) + "/configs/single_file/" + kind);
  const std::string exe = self_exe_dir();
  candidates.push_back(exe + "/" + DPINFER_EXE_TO_CONFIGS_DIR + "/single_file/" + kind);  // installed
  candidates.push_back(exe + "/../share/dpinfer/configs/single_file/" + kind);             // the build tree
  std::string looked;
  for (const std::string& dir : candidates) {
    if (::access((dir + "/model_index.json").c_str(), R_OK) == 0) return fs::weakly_canonical(dir).string();
    looked += (looked.empty() ? "" : ", ") + dir;
  }
  throw InputError("dpinfer's default configs for " + single_file_kind_label(kind) + " single files are not installed "
                   "(looked in " + looked + "); pass --base DIR|org/name, set DPINFER_DATA_DIR, or reinstall dpinfer");
}

ModelDir resolve_single_file(const std::string& path, const SingleFileOptions& options,
                             std::vector<ModelDirError>* errors) {
  const std::string where = quote(path);
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (ext == ".ckpt" || ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".pkl")
    throw InputError(where + " is a pickle, which dpinfer never loads (it can run code); convert it once in python "
                     "with diffusers: from diffusers import StableDiffusionPipeline; "
                     "StableDiffusionPipeline.from_single_file('" + path + "').save_pretrained('" +
                     fs::path(path).replace_extension().string() + "', safe_serialization=True)");
  std::vector<SourceTensor> tensors;
  std::string gguf_storage;  // a GGUF file's, e.g. "gguf-Q4_K"
  if (ext == ".gguf" || io::GgufFile::has_magic(path)) {
    // A city96-style GGUF transformer file: its tensors by their shapes in values.
    const std::shared_ptr<const io::GgufFile> gguf = io::GgufFile::open(path);
    for (const io::GgufTensor& t : gguf->tensors()) tensors.push_back({t.name, t.shape});
    gguf_storage = gguf_weight_storage(*gguf);
  } else {
    std::shared_ptr<const io::SafetensorsFile> file;
    try {
      file = io::SafetensorsFile::open(path);
    } catch (const Error& e) {
      throw InputError(where + " is not a safetensors checkpoint (" + one_line(e.what()) +
                       "); dpinfer reads single files in safetensors or GGUF format only");
    }
    for (const io::TensorView& v : file->tensors()) tensors.push_back({v.name, v.shape});
  }
  const std::optional<DitDetection> dit = detect_dit_checkpoint(tensors, path);
  if (!gguf_storage.empty() && !dit)
    throw InputError(where + " is a GGUF file but not a transformer dpinfer knows (FLUX.1, Chroma, SD3 / SD3.5, "
                     "Qwen-Image, Z-Image or FLUX.2); dpinfer reads GGUF files of those transformers only");
  const LdmDetection detected =
      dit ? LdmDetection{dit->kind, dit->label, dit->variant} : detect_ldm_checkpoint(tensors, path);

  // The base: its family, configs, tokenizers and scheduler, and the weights the file lacks.
  SingleFileInfo info;
  info.path = fs::absolute(path).lexically_normal().string();
  info.variant = detected.variant;
  info.weight_storage = gguf_storage;
  std::string base = options.base;
  if (base.empty()) {
    if (detected.kind.empty())
      throw InputError(where + " holds a Stable Diffusion UNet whose family its keys do not tell (no text encoder, "
                       "cross-attention width neither 768 nor 1024); pass --base DIR|org/name, a diffusers "
                       "pipeline of the same architecture");
    const Kind& detected_row = single_file_table::at(detected.kind);
    if (!detected_row.shipped_base)
      // Their tokenizers (CLIP's and T5's; Chroma's T5 only) are not in the file, and dpinfer ships no
      // T5 vocabulary (tokenizer_3 / tokenizer): a diffusers pipeline of the family must give them.
      throw InputError(where + " is a " + detected_row.label +
                       (detected.variant.empty() ? "" : " (" + detected.variant + ")") +
                       " single file, which holds no tokenizers; pass --base DIR|org/name, a diffusers " +
                       detected_row.pipeline_class + detected_row.base_example +
                       ", for its configs, tokenizers, scheduler and the components the file lacks");
    base = shipped_config_dir(detected.kind);
    info.shipped_base = true;
  }
  ModelDir model = resolve_model(base, "", errors);
  const std::string kind = !detected.kind.empty()                                         ? detected.kind
                           : model.family->pipeline_classes[0] == "StableDiffusionXLPipeline" ? "sdxl"
                                                                                              : "sd1";
  const Kind& row = single_file_table::at(kind);
  const std::string& family_class = row.pipeline_class;
  if (std::find(model.family->pipeline_classes.begin(), model.family->pipeline_classes.end(), family_class) ==
      model.family->pipeline_classes.end())
    throw InputError(where + " is a " + row.label + " checkpoint but --base " + quote(base) +
                     " is a " + model.family->label + " pipeline; give a base of the checkpoint's family");
  info.kind = kind;
  // "Stable Diffusion 3 (SD3.5 large, SD3 MMDiT single file)", "FLUX.1 [dev] (BFL FLUX.1 transformer file)".
  const std::string file_kind =
      !row.file_kind.empty() ? row.file_kind : std::string(layout_name(dit->layout)) + " transformer file";
  // An LDM file's variant (SD 2.x's prediction) is info.variant's alone; a DiT file's (SD3.5 large) names the file.
  info.label = row.label + " (" + (dit && !detected.variant.empty() ? detected.variant + ", " : "") + file_kind + ")";
  info.base = model.root;
  model.spec = path;
  model.name = fs::path(path).stem().string();
  model.revision.clear();

  const std::vector<ComponentSlot> slots = row.slots(dit ? dit->prefix : "");
  for (const ComponentSlot& slot : slots) {
    Component* c = nullptr;
    for (Component& x : model.components)
      if (x.name == slot.component) c = &x;
    if (!c) continue;  // resolve_model reported it
    try {
      // An option wins over the file (a better VAE for a checkpoint that bakes one in), the
      // file over the base.
      const std::string& given = slot.component == "vae"              ? options.vae
                                 : slot.component == "text_encoder"   ? options.text_encoder
                                 : slot.component == "text_encoder_2" ? options.text_encoder_2
                                                                      : std::string();
      if (!given.empty()) {
        take_folder(*c, given, slot.option);
        continue;
      }
      if (slot.in_file && has_prefix(tensors, slot.prefix)) {
        if (dit && slot.component == "transformer")
          fit_config(*c, row.config_facts(slot.prefix, tensors), info.shipped_base, where, model.root);
        c->single_file = info.path;
        c->key_prefix = slot.prefix;
        c->layout = slot.layout;
        c->source = "single file (" + slot.prefix + "*, " + layout_name(slot.layout) + ")";
        continue;
      }
      if (!info.shipped_base && !c->path.empty() && has_weight_files(c->path)) {
        c->source = "--base " + model.root;
        continue;
      }
      const std::string lacks = slot.in_file ? " has no " + c->name + " (no " + slot.prefix + "* keys)"
                                             : " is a " + row.label + " transformer only, without a " + c->name;
      const std::string with_option =
          slot.option.empty() ? "" : slot.option + " DIR (a diffusers/transformers " + c->class_name + " folder) or ";
      throw InputError(where + lacks + "; give it with " + with_option + "--base DIR|org/name (a " + family_class +
                       " that has one)");
    } catch (const Error& e) {
      if (!errors) throw;
      errors->push_back({c->name, e.what()});
    }
  }
  if (!options.text_encoder_2.empty() &&
      std::none_of(slots.begin(), slots.end(), [](const ComponentSlot& s) { return s.option == "--text-encoder-2"; }))
    throw InputError("--text-encoder-2 is for SDXL, SD3 and FLUX.1 checkpoints; " + where + " is " + row.label);
  if (row.shipped_t5_vocabulary_stand_in && info.shipped_base) {
    // The shipped FLUX.1 configs' tokenizer_2 is the offline stand-in T5 vocabulary of
    // configs/models/flux-dev-shape, not T5's: prompts would be tokenized wrongly. T5's own
    // comes from a --text-encoder-2 folder that holds it beside the weights (transformers'
    // T5 folders such as google/t5-v1_1-xxl ship spiece.model there), else from --base.
    Component* tokenizer = nullptr;
    for (Component& x : model.components)
      if (x.name == "tokenizer_2") tokenizer = &x;
    const fs::path t5 = options.text_encoder_2.empty() ? fs::path() : fs::absolute(options.text_encoder_2);
    if (tokenizer && !t5.empty() && file_exists((t5 / "spiece.model").string())) {
      tokenizer->path = t5.string();
      const fs::path config = t5 / "tokenizer_config.json";
      tokenizer->config =
          file_exists(config.string()) ? io::read_json_object_file(config.string()) : nlohmann::json::object();
      tokenizer->source = "--text-encoder-2 " + t5.string();
    } else {
      const std::string message =
          where + " is a " + row.label + " transformer only, and dpinfer ships no T5 vocabulary for its "
          "tokenizer_2; give --base DIR|org/name, a diffusers FLUX.1 pipeline (its tokenizers and scheduler, and the "
          "VAE and text encoders unless --vae/--text-encoder/--text-encoder-2 give them), or a --text-encoder-2 DIR "
          "that holds T5's spiece.model beside its weights";
      if (!errors) throw InputError(message);
      errors->push_back({"tokenizer_2", message});
    }
  }
  for (Component& c : model.components)
    if (c.source.empty()) c.source = (info.shipped_base ? "shipped config " : "--base ") + model.root;
  model.single_file = info;
  return model;
}

}  // namespace dpinfer::pipeline

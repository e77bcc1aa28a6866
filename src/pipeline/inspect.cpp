#include "dpinfer/pipeline/inspect.h"

#include <ATen/ATen.h>
#include <c10/core/DefaultDtype.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/autoencoder_kl.h"
#include "dpinfer/pipeline/clip_text_model.h"
#include "dpinfer/pipeline/clip_tokenizer.h"
#include "dpinfer/pipeline/model_configs.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/scheduler.h"
#include "dpinfer/pipeline/unet_2d_condition.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

constexpr size_t kMaxListed = 10;

/// Records a failed step: `message` goes to `own` (the component's error, when it has none
/// yet) and to the report's error (when it is the first).
void record(InspectReport& report, std::string* own, std::string message, bool bad_input) {
  message = first_line(message);
  if (own && own->empty()) *own = message;
  if (report.error.empty()) {
    report.error = message;
    report.bad_input = bad_input;
  }
}

/// Runs one step of the load; a failure is record()ed. Returns whether it passed.
bool step(InspectReport& report, std::string* own, const std::function<void()>& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    record(report, own, e.what(), true);
  } catch (const std::exception& e) {
    record(report, own, e.what(), false);
  }
  return false;
}

/// Whether `path` is a folder: the weights of a component whose folder is missing (or not
/// known, when model_index.json did not name it) are not looked for.
bool is_folder(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec);
}

/// Sets the dtype LibTorch gives new parameters while it lives: modules built only for
/// their names and shapes then take half the memory of float32.
class DefaultDtypeGuard {
 public:
  explicit DefaultDtypeGuard(caffe2::TypeMeta dtype) : saved_(c10::get_default_dtype()) {
    c10::set_default_dtype(dtype);
  }
  ~DefaultDtypeGuard() { c10::set_default_dtype(saved_); }
  DefaultDtypeGuard(const DefaultDtypeGuard&) = delete;
  DefaultDtypeGuard& operator=(const DefaultDtypeGuard&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

const KeyRenames& no_renames() {
  static const KeyRenames none;
  return none;
}

ComponentReport describe(const Component& c) {
  ComponentReport r;
  r.name = c.name;
  r.library = c.library;
  r.class_name = c.class_name;
  r.path = c.path;
  return r;
}

const char* down_name(UNetConfig::DownBlockType t) {
  return t == UNetConfig::DownBlockType::kCrossAttnDownBlock2D ? "CrossAttnDownBlock2D" : "DownBlock2D";
}

const char* up_name(UNetConfig::UpBlockType t) {
  return t == UNetConfig::UpBlockType::kCrossAttnUpBlock2D ? "CrossAttnUpBlock2D" : "UpBlock2D";
}

const char* mid_name(UNetConfig::MidBlockType t) {
  switch (t) {
    case UNetConfig::MidBlockType::kNone: return "none";
    case UNetConfig::MidBlockType::kUNetMidBlock2DCrossAttn: return "UNetMidBlock2DCrossAttn";
    case UNetConfig::MidBlockType::kUNetMidBlock2D: return "UNetMidBlock2D";
  }
  return "?";
}

ordered_json clip_facts(const CLIPTextConfig& c) {
  ordered_json j;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["hidden_act"] = c.hidden_act == CLIPTextConfig::Activation::kQuickGELU ? "quick_gelu" : "gelu";
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  return j;
}

ordered_json unet_facts(const UNetConfig& c) {
  ordered_json j;
  std::vector<std::string> down, up;
  for (auto t : c.down_block_types) down.push_back(down_name(t));
  for (auto t : c.up_block_types) up.push_back(up_name(t));
  j["down_block_types"] = down;
  j["mid_block_type"] = mid_name(c.mid_block_type);
  j["up_block_types"] = up;
  j["block_out_channels"] = c.block_out_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["num_attention_heads"] = c.num_attention_heads;
  j["cross_attention_dim"] = c.cross_attention_dim;
  j["use_linear_projection"] = c.use_linear_projection;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  if (c.sample_size)
    j["sample_size"] = {(*c.sample_size)[0], (*c.sample_size)[1]};
  else
    j["sample_size"] = nullptr;
  if (c.time_cond_proj_dim) j["time_cond_proj_dim"] = *c.time_cond_proj_dim;
  return j;
}

ordered_json vae_facts(const AutoencoderKLConfig& c) {
  ordered_json j;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["latent_channels"] = c.latent_channels;
  j["block_out_channels"] = c.block_out_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["scale_factor"] = c.scale_factor();
  j["scaling_factor"] = c.scaling_factor;
  if (c.shift_factor) j["shift_factor"] = *c.shift_factor;
  j["force_upcast"] = c.force_upcast;
  return j;
}

/// The component's files and their header statistics, then the key check against the
/// module `build` makes (skipped when `build` is empty: its config failed). The order is
/// load_component()'s in stable_diffusion.cpp: build, find the files, load.
void check_weights(InspectReport& report, ComponentReport& r, const Component& c, const std::string& variant,
                   const KeyRenames& renames,
                   const std::function<std::shared_ptr<torch::nn::Module>()>& build) {
  std::shared_ptr<torch::nn::Module> module;
  bool built = false;
  if (build) {
    built = step(report, &r.error, [&] {
      at::NoGradGuard no_grad;
      DefaultDtypeGuard half(caffe2::TypeMeta::Make<at::Half>());
      module = build();
    });
  }
  r.variant = c.variant;
  r.fell_back = !variant.empty() && c.variant.empty();
  WeightFiles found;
  if (!step(report, &r.error, [&] { found = find_weight_files(c.path, c.variant); })) return;
  r.files = found.files;
  r.index = found.index;
  bool readable = step(report, &r.error, [&] {
    for (const std::string& path : found.files) {
      auto file = io::SafetensorsFile::open(path);
      r.bytes += file->file_size();
      for (const io::TensorView& t : file->tensors()) {
        DtypeCount& count = r.dtypes[std::string(io::dtype_name(t.dtype))];
        ++count.tensors;
        count.parameters += t.numel();
        r.parameters += t.numel();
      }
    }
  });
  if (!readable || !built) return;
  step(report, &r.error, [&] {
    r.keys = match_keys(*module, found.files, renames, c.name);
    if (!r.keys->ok()) throw Error(key_mismatch_message(*r.keys, found.files, c.name));
  });
}

/// `object[key]` when it is a string, else `fallback` (a wrong type is the loader's to report).
std::string string_field(const nlohmann::json& object, const char* key, const std::string& fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

ordered_json or_null(const std::string& s) { return s.empty() ? ordered_json(nullptr) : ordered_json(s); }

ordered_json first(const std::vector<std::string>& items) {
  return std::vector<std::string>(items.begin(), items.begin() + std::min(items.size(), kMaxListed));
}

ordered_json component_json(const ComponentReport& r) {
  ordered_json j;
  j["class"] = r.class_name;
  j["library"] = r.library;
  j["path"] = r.path;
  j["config"] = r.config;
  ordered_json w;
  w["files"] = r.files;
  w["index"] = or_null(r.index);
  w["variant"] = or_null(r.variant);
  w["fell_back"] = r.fell_back;
  w["parameters"] = r.parameters;
  w["bytes"] = r.bytes;
  ordered_json dtypes = ordered_json::object();
  for (const auto& [name, count] : r.dtypes)
    dtypes[name] = {{"tensors", count.tensors}, {"parameters", count.parameters}};
  w["dtypes"] = dtypes;
  j["weights"] = w;
  if (r.keys) {
    const KeyReport& k = *r.keys;
    j["keys"] = {{"ok", k.ok()},
                 {"matched", k.matched},
                 {"missing_count", k.missing.size()},
                 {"missing", first(k.missing)},
                 {"unexpected_count", k.unexpected.size()},
                 {"unexpected", first(k.unexpected)},
                 {"mismatched_count", k.mismatched.size()},
                 {"mismatched", first(k.mismatched)}};
  } else {
    j["keys"] = nullptr;
  }
  j["error"] = or_null(r.error);
  return j;
}

ordered_json token_json(const SpecialToken& t) { return {{"token", t.token}, {"id", t.id}}; }

/// 859520964 -> "859,520,964".
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxListed) out += ", and " + std::to_string(items.size() - kMaxListed) + " more";
  return out;
}

std::string fact_text(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& item : v) out += (out.empty() ? "" : ", ") + fact_text(item);
    return "[" + out + "]";
  }
  return v.dump();
}

void component_text(std::ostream& out, const ComponentReport& r) {
  out << "\n" << r.name << ": " << (r.class_name.empty() ? "?" : r.class_name);
  if (!r.library.empty()) out << " (" << r.library << ")";
  out << "\n";
  if (!r.path.empty()) out << "  folder: " << r.path << "\n";
  for (const auto& [key, value] : r.config.items()) out << "  " << key << ": " << fact_text(value) << "\n";
  if (!r.files.empty()) {
    out << "  weights: ";
    if (!r.index.empty()) out << fs::path(r.index).filename().string() << " -> ";
    for (size_t i = 0; i < r.files.size(); ++i) out << (i ? ", " : "") << fs::path(r.files[i]).filename().string();
    if (!r.variant.empty()) out << " (variant " << r.variant << ")";
    if (r.fell_back) out << " (no such variant here: the plain weights)";
    out << "\n";
  }
  if (r.parameters || !r.dtypes.empty()) {
    out << "  parameters: " << grouped(static_cast<uint64_t>(r.parameters)) << " in " << grouped(r.bytes) << " bytes:";
    bool first_dtype = true;
    for (const auto& [name, count] : r.dtypes) {
      out << (first_dtype ? " " : ", ") << name << " " << grouped(static_cast<uint64_t>(count.parameters)) << " ("
          << count.tensors << " tensors)";
      first_dtype = false;
    }
    out << "\n";
  }
  if (r.keys) {
    const KeyReport& k = *r.keys;
    if (k.ok()) {
      out << "  keys: all " << k.matched << " match the model\n";
    } else {
      out << "  keys: " << k.matched << " match the model\n";
      if (!k.missing.empty()) out << "    missing: " << k.missing.size() << " (" << listed(k.missing) << ")\n";
      if (!k.unexpected.empty())
        out << "    unexpected: " << k.unexpected.size() << " (" << listed(k.unexpected) << ")\n";
      if (!k.mismatched.empty())
        out << "    of the wrong shape: " << k.mismatched.size() << " (" << listed(k.mismatched) << ")\n";
    }
  }
  if (!r.error.empty()) out << "  error: " << r.error << "\n";
}

std::string token_text(const SpecialToken& t) { return t.token + " (" + std::to_string(t.id) + ")"; }

}  // namespace

InspectReport inspect_model(const std::string& spec, const std::string& variant, const std::string& scheduler) {
  InspectReport report;
  report.spec = spec;
  report.variant = variant;
  report.scheduler.requested = scheduler;
  ModelDir md;
  // The components' errors are collected, not thrown, so that the other components and
  // the later steps still run; the first is the one resolve_model() alone throws.
  std::vector<ModelDirError> resolve_errors;
  if (!step(report, nullptr, [&] { md = resolve_model(spec, variant, &resolve_errors); })) return report;
  report.root = md.root;
  report.revision = md.revision;
  report.pipeline = string_field(md.model_index, "_class_name", "");
  report.ignored_components = md.ignored_components;
  report.text_encoder = describe(md.text_encoder);
  report.unet = describe(md.unet);
  report.vae = describe(md.vae);
  report.tokenizer.class_name = md.tokenizer.class_name;
  report.tokenizer.path = md.tokenizer.path;
  report.scheduler.class_name = string_field(md.scheduler.config, "_class_name", md.scheduler.class_name);
  report.scheduler.path = md.scheduler.path;
  for (const ModelDirError& e : resolve_errors) {
    std::string* own = e.component == "unet"           ? &report.unet.error
                       : e.component == "text_encoder" ? &report.text_encoder.error
                       : e.component == "tokenizer"    ? &report.tokenizer.error
                       : e.component == "vae"          ? &report.vae.error
                       : e.component == "scheduler"    ? &report.scheduler.error
                                                       : nullptr;  // the --variant check
    if (!own) report.variant_error = e.message;
    record(report, own, e.message, true);
  }

  // StableDiffusionPipeline's order: the tokenizer, the three configs, then each module's
  // weights, then the scheduler. A component resolve_model() failed on skips the steps
  // that need what it could not read: its config (not parsed), or its folder.
  if (report.tokenizer.error.empty()) step(report, &report.tokenizer.error, [&] {
    const CLIPTokenizer tokenizer = CLIPTokenizer::from_dir(md.tokenizer.path);
    TokenizerReport& t = report.tokenizer;
    t.vocab_size = tokenizer.vocab_size();
    t.model_max_length = tokenizer.model_max_length();
    t.bos = {tokenizer.bos_token(), tokenizer.bos_id()};
    t.eos = {tokenizer.eos_token(), tokenizer.eos_id()};
    t.pad = {tokenizer.pad_token(), tokenizer.pad_id()};
    t.unk = {tokenizer.unk_token(), tokenizer.unk_id()};
  });
  std::optional<CLIPTextConfig> te_config;
  std::optional<UNetConfig> unet_config;
  std::optional<AutoencoderKLConfig> vae_config;
  if (md.text_encoder.config.is_object())
    step(report, &report.text_encoder.error, [&] { te_config = CLIPTextConfig::from_json(md.text_encoder.config); });
  if (md.unet.config.is_object())
    step(report, &report.unet.error, [&] { unet_config = UNetConfig::from_json(md.unet.config); });
  if (md.vae.config.is_object())
    step(report, &report.vae.error, [&] { vae_config = AutoencoderKLConfig::from_json(md.vae.config); });
  if (te_config) report.text_encoder.config = clip_facts(*te_config);
  if (unet_config) report.unet.config = unet_facts(*unet_config);
  if (vae_config) report.vae.config = vae_facts(*vae_config);
  if (unet_config && vae_config) {
    const auto sample = unet_config->sample_size.value_or(std::array<int64_t, 2>{64, 64});
    report.default_size = std::array<int64_t, 2>{sample[0] * vae_config->scale_factor(),
                                                 sample[1] * vae_config->scale_factor()};
  }

  using Build = std::function<std::shared_ptr<torch::nn::Module>()>;
  Build te_build, unet_build, vae_build;
  if (te_config) te_build = [&] { return std::make_shared<CLIPTextModelImpl>(*te_config); };
  if (unet_config) unet_build = [&] { return std::make_shared<UNet2DConditionModelImpl>(*unet_config); };
  if (vae_config) vae_build = [&] { return std::make_shared<AutoencoderKLImpl>(*vae_config); };
  if (is_folder(md.text_encoder.path))
    check_weights(report, report.text_encoder, md.text_encoder, variant, clip_text_key_renames(), te_build);
  if (is_folder(md.unet.path)) check_weights(report, report.unet, md.unet, variant, no_renames(), unet_build);
  if (is_folder(md.vae.path)) check_weights(report, report.vae, md.vae, variant, vae_key_renames(), vae_build);

  // The scheduler as `dpinfer generate --scheduler` builds it: the same make_scheduler()
  // call, so an unknown name or an unsupported class fails here as it fails there.
  const nlohmann::json& sc = md.scheduler.config;
  report.scheduler.prediction_type = string_field(sc, "prediction_type", "");
  report.scheduler.timestep_spacing = string_field(sc, "timestep_spacing", "");
  if (report.scheduler.error.empty())
    step(report, &report.scheduler.error,
         [&] { report.scheduler.dpinfer_name = make_scheduler(sc, scheduler)->name(); });
  return report;
}

ordered_json InspectReport::to_json() const {
  ordered_json j;
  j["model"] = spec;
  j["variant"] = or_null(variant);
  j["variant_error"] = or_null(variant_error);
  j["path"] = or_null(root);
  j["revision"] = or_null(revision);
  j["pipeline"] = or_null(pipeline);
  j["ok"] = ok();
  j["error"] = or_null(error);
  if (root.empty()) return j;
  if (default_size)
    j["default_size"] = {{"width", (*default_size)[1]}, {"height", (*default_size)[0]}};
  else
    j["default_size"] = nullptr;
  ordered_json components;
  components["text_encoder"] = component_json(text_encoder);
  components["unet"] = component_json(unet);
  components["vae"] = component_json(vae);
  const TokenizerReport& t = tokenizer;
  components["tokenizer"] = {{"class", t.class_name},
                             {"path", t.path},
                             {"vocab_size", t.vocab_size},
                             {"model_max_length", t.model_max_length},
                             {"bos", token_json(t.bos)},
                             {"eos", token_json(t.eos)},
                             {"pad", token_json(t.pad)},
                             {"unk", token_json(t.unk)},
                             {"error", or_null(t.error)}};
  const SchedulerReport& s = scheduler;
  components["scheduler"] = {{"class", s.class_name},
                             {"path", s.path},
                             {"requested", or_null(s.requested)},
                             {"dpinfer_name", or_null(s.dpinfer_name)},
                             {"prediction_type", or_null(s.prediction_type)},
                             {"timestep_spacing", or_null(s.timestep_spacing)},
                             {"error", or_null(s.error)}};
  j["components"] = components;
  j["ignored_components"] = ignored_components;
  return j;
}

std::string InspectReport::to_text() const {
  std::ostringstream out;
  out << "model: " << spec << "\n";
  if (root.empty()) return out.str();
  out << "path: " << root << "\n";
  if (!revision.empty()) out << "revision: " << revision << "\n";
  out << "pipeline: " << pipeline << "\n";
  if (!variant.empty()) out << "variant: " << variant << "\n";
  if (!variant_error.empty()) out << "  error: " << variant_error << "\n";
  if (default_size)
    out << "default_size: " << (*default_size)[1] << "x" << (*default_size)[0] << " (width x height)\n";
  if (!ignored_components.empty()) out << "ignored: " << listed(ignored_components) << "\n";
  component_text(out, text_encoder);
  component_text(out, unet);
  component_text(out, vae);

  out << "\ntokenizer: " << (tokenizer.class_name.empty() ? "?" : tokenizer.class_name) << "\n";
  if (!tokenizer.path.empty()) out << "  folder: " << tokenizer.path << "\n";
  if (tokenizer.error.empty()) {
    out << "  vocab_size: " << tokenizer.vocab_size << "\n";
    out << "  model_max_length: " << tokenizer.model_max_length << "\n";
    out << "  bos: " << token_text(tokenizer.bos) << ", eos: " << token_text(tokenizer.eos)
        << ", pad: " << token_text(tokenizer.pad) << ", unk: " << token_text(tokenizer.unk) << "\n";
  } else {
    out << "  error: " << tokenizer.error << "\n";
  }

  out << "\nscheduler: " << (scheduler.class_name.empty() ? "?" : scheduler.class_name);
  if (!scheduler.dpinfer_name.empty())
    out << " (dpinfer " << scheduler.dpinfer_name << (scheduler.requested.empty() ? "" : ", from --scheduler") << ")";
  else if (!scheduler.requested.empty())
    out << " (--scheduler " << scheduler.requested << ")";
  out << "\n";
  if (!scheduler.path.empty()) out << "  folder: " << scheduler.path << "\n";
  out << "  prediction_type: " << (scheduler.prediction_type.empty() ? "epsilon (not set)" : scheduler.prediction_type)
      << "\n";
  out << "  timestep_spacing: "
      << (scheduler.timestep_spacing.empty() ? "the class default (not set)" : scheduler.timestep_spacing) << "\n";
  if (!scheduler.error.empty()) out << "  error: " << scheduler.error << "\n";

  out << "\n" << (ok() ? "ok: the model loads" : "fails: the model does not load") << "\n";
  return out.str();
}

}  // namespace dpinfer::pipeline

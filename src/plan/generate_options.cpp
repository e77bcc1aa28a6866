#include "dpinfer/plan/generate_options.h"

#include "dpinfer/plan/record_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/pipeline/families/family_spec.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/util/cli_extras.h"
#include "dpinfer/util/cli_reference.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

/// The options that fill GenerateOptions::settings, as parsed.
struct SettingArgs {
  std::optional<int> clip_skip;
  std::optional<double> guidance_rescale;
  std::vector<std::string> set;  ///< KEY=VALUE
  std::vector<std::string> scheduler_set;  ///< KEY=VALUE
  std::vector<std::string> lora;  ///< PATH[:SCALE], in order
};

void add_options(CLI::App& app, GenerateOptions& o, SettingArgs& settings) {
  app.add_option("prompts", o.prompts,
                 "prompts file: .txt (one per line), .jsonl, .csv/.tsv with a header row, or .parquet; a folder of .txt "
                 "files or of .parquet files (a Hugging Face datasets folder); - reads stdin")
      ->required();
  app.add_flag("--jsonl", o.jsonl_stdin, "stdin (-) holds JSONL rather than text");
  app.add_option("--prompt-column", o.prompt_column, "a .csv/.tsv/.parquet prompts file's column of the prompt")
      ->capture_default_str();
  app.add_flag("--keep-fields", o.keep_fields,
               "carry a prompts line's unknown JSONL keys or CSV/TSV columns into each of its images' records, "
               "instead of refusing them");
  app.add_option("--model,-m", o.model,
                 "diffusers directory, hub id (org/name, from the local HF cache) or single-file checkpoint "
                 "(.safetensors: SD 1.x/2.x/SDXL, SD3/3.5, FLUX.1, Chroma, Qwen-Image, Z-Image, as their makers ship "
                 "them; .gguf: a city96-style GGUF transformer of those DiTs), or an embedded model by name "
                 "(dpinfer-shapes-dit-64: the trained flow-matching DiT); default: the embedded dpinfer-shapes-64");
  app.add_option("--base", o.base,
                 "for a single-file --model: the diffusers pipeline (directory or hub id) whose configs, tokenizers, "
                 "scheduler and missing components it uses (default: dpinfer's shipped config of its family)");
  app.add_option("--text-encoder", o.text_encoder,
                 "for a single-file --model without one: a text_encoder folder (config.json + safetensors)");
  app.add_option("--text-encoder-2", o.text_encoder_2,
                 "for a single-file --model without one: a text_encoder_2 folder (SDXL's and SD3's second CLIP, FLUX.1's "
                 "T5)");
  app.add_option("--vae", o.vae, "for a single-file --model without one: a vae folder (config.json + safetensors)");
  app.add_option("--variant", o.variant, "weights variant, e.g. fp16 (*.fp16.safetensors)");
  app.add_option("--out,-o", o.out, "output directory")->capture_default_str();
  app.add_option("--seed", o.seed, "base seed: item i gets seed + i (see --seed-from)")->capture_default_str();
  app.add_option("--seed-from", o.seed_from,
                 "index: item i gets seed + i; prompt: seed + a hash of the prompt text and how many times it "
                 "came before (stable when lines are inserted); a JSONL line's seed wins either way")
      ->capture_default_str();
  app.add_option("--num-images,--num-images-per-prompt", o.num_images,
                 "images per prompt line that sets no num_images, 1..100000 (default: 1; diffusers' "
                 "num_images_per_prompt); each is an item of its own, with its own seed and file");
  // The defaults and size multiples are the family rows' (pipeline/families/family_spec.h, torch-free), so the
  // help cannot go stale; `dpinfer inspect --families` and the README's model table print the same rows.
  using pipeline::FamilySpec;
  using pipeline::values_by_family;
  const auto number = [](double v) { return fmt::format("{}", v); };
  app.add_option("--steps", o.steps,
                 "denoising steps, 1..10000 (default: the model family's: " +
                     values_by_family([&](const FamilySpec& f) { return number(f.default_steps); }) + ")");
  app.add_option("--guidance-scale,--cfg", o.guidance_scale,
                 "guidance scale: classifier-free guidance, or the family's own kind (FLUX.1's distilled guidance "
                 "input, Qwen-Image's true_cfg_scale) (default: the model family's: " +
                     values_by_family([&](const FamilySpec& f) { return number(f.default_guidance_scale); }) + ")");
  const std::string multiples =
      values_by_family([&](const FamilySpec& f) { return number(f.size_multiple); });
  app.add_option("--width", o.width,
                 "image width up to 16384, a multiple of the model family's size multiple (" + multiples +
                     ") (default: the model's)");
  app.add_option("--height", o.height,
                 "image height up to 16384, a multiple of the model family's size multiple (" + multiples +
                     ") (default: the model's)");
  app.add_option("--negative-prompt", o.negative_prompt, "negative prompt for lines that set none");
  app.add_option("--image", o.image,
                 "input image (PNG, JPEG or WebP) for lines that set no `image`: each such item starts from it "
                 "(img2img), resized to the item's size as diffusers' VaeImageProcessor resizes");
  app.add_option("--mask", o.mask,
                 "inpainting mask (PNG, JPEG or WebP; white is repainted, black kept) for lines with an input image "
                 "that set no `mask`");
  app.add_option("--strength", o.strength,
                 "img2img strength in (0, 1] for items with an input image whose line sets none: the share of the "
                 "denoising steps run from the noised image (default: the model family's, as its diffusers "
                 "img2img pipeline has it: " +
                     values_by_family([&](const FamilySpec& f) {
                       return f.default_strength > 0 ? number(f.default_strength) : std::string();
                     }) +
                     "; an inpainting item's: " +
                     values_by_family([&](const FamilySpec& f) {
                       return f.default_inpaint_strength > 0 ? number(f.default_inpaint_strength) : std::string();
                     }) +
                     ")");
  app.add_option("--scheduler", o.scheduler,
                 "pndm, ddim, euler, euler_a, dpm++2m, dpm++2m-karras, lms or unipc for a UNet model (SD, SDXL); "
                 "flow_match_euler for a flow-matching one (default: the model's)");
  app.add_option("--scheduler-set", settings.scheduler_set,
                 "a key of the model's scheduler_config.json for this run, KEY=VALUE (repeatable), as if the file "
                 "said so, e.g. --scheduler-set timestep_spacing=trailing (SDXL-Lightning), --scheduler-set "
                 "use_karras_sigmas=true; values are JSON (true, 3.0, \"trailing\") or else strings");
  app.add_option("--dtype", o.dtype, "auto (fp16 on CUDA, fp32 on CPU), fp32, fp16 or bf16")->capture_default_str();
  app.add_flag("--vae-tiling", o.vae_tiling,
               "decode large images in overlapping tiles, blended at their edges, as diffusers' "
               "vae.enable_tiling(): less memory for 2048x2048 and larger; the blend changes pixels slightly, so "
               "it is recorded and a resumed run must match it");
  app.add_option("--device", o.device, "auto (cuda:LOCAL_RANK when CUDA is available), cuda or cpu")
      ->capture_default_str();
  app.add_option("--weight-storage", o.weight_storage,
                 "default (weights in --dtype), fp8 (the denoiser's and text encoders' Linear and Conv2d weights "
                 "kept in float8_e4m3fn and cast to --dtype per layer, as diffusers' enable_layerwise_casting: about "
                 "half the memory of bf16 weights, slightly different images) or fp8-denoiser (the denoiser's only)")
      ->capture_default_str();
  app.add_option("--attention-backend", o.attention_backend,
                 "auto, flash, efficient, cudnn or math: the scaled-dot-product-attention kernel every attention "
                 "uses, as torch.nn.attention.sdpa_kernel (auto: LibTorch picks per call). On the CPU only math "
                 "and flash exist; efficient and cudnn need CUDA, and flash on CUDA fp16 or bf16. Kernels round "
                 "differently, so it is recorded and a resumed run must match it")
      ->capture_default_str();
  app.add_flag("--channels-last", o.channels_last,
               "keep the denoiser's and the VAE's convolution weights, and so their activations, in channels-last "
               "memory format, as diffusers' pipe.unet.to(memory_format=torch.channels_last): faster convolutions "
               "on some GPUs; other kernels round differently, so it is recorded and a resumed run must match it");
  app.add_option("--fp8-compute", o.fp8_compute,
                 "off, tensorwise or rowwise: the Linear layers of a DiT denoiser's blocks multiply in float8 "
                 "(torch._scaled_mm), their weights quantized once and each input per call with a scale per "
                 "tensor or per row, as torchao's Float8DynamicActivationFloat8WeightConfig: faster on Hopper and "
                 "Ada GPUs, half the blocks' weight memory, other pixels (recorded, and a resumed run must match). "
                 "rowwise needs CUDA and --dtype bf16")
      ->capture_default_str();
  app.add_flag("--cuda-graphs", o.cuda_graphs,
               "capture each denoiser call once per latent size and batch as a CUDA graph and replay it, as "
               "torch.cuda.graph: the same kernels and pixels without the CPU's launch cost per kernel, which "
               "matters for small images and batches. " +
                   pipeline::family_labels([](const FamilySpec& f) { return f.cuda_graphs; }) +
                   " models on CUDA; not with --offload or a step cache");
  app.add_option("--batch-size", o.batch_size, "images per forward pass")->capture_default_str();
  app.add_option("--shard-mode", o.shard_mode, "contiguous, strided or dynamic")->capture_default_str();
  app.add_option("--shard", o.shard, "take only outer shard I of N (I/N), before splitting across ranks");
  app.add_flag("--overwrite", o.overwrite, "regenerate items whose PNG exists (default: skip them)");
  app.add_option("--set", settings.set,
                 "a model setting, KEY=VALUE (repeatable), e.g. --set clip_skip=1; `dpinfer inspect MODEL` lists "
                 "the model's settings");
  app.add_option("--lora", settings.lora,
                 "a LoRA to merge into the model (on fp8 or GGUF weights applied unfused, as diffusers applies it), "
                 "PATH[:SCALE] (repeatable; scale 1 by default), e.g. --lora "
                 "detail.safetensors:0.8; PATH is a .safetensors file, a folder holding one, or a hub id (org/name, "
                 "org/name/file.safetensors) in the hugging face cache; a prompts line's \"loras\" replaces them for "
                 "its items");
  app.add_option("--clip-skip", settings.clip_skip, "skip the last N CLIP layers (--set clip_skip=N; default: 0)");
  app.add_option("--guidance-rescale", settings.guidance_rescale,
                 "diffusers' guidance_rescale (--set guidance_rescale=X; default: 0, off)");
  app.add_option("--rendezvous-timeout", o.rendezvous_timeout_s, "seconds to wait for the other ranks")
      ->capture_default_str();
  app.add_flag("--requeue-on-signal", o.requeue_on_signal,
               "in a SLURM job stopped by SIGTERM, SIGUSR1 or SIGUSR2 (e.g. sbatch --signal=B:USR1@120): "
               "rank 0 requeues the job or array task (scontrol requeue) once the manifests are flushed");
  app.add_option("--stop-timeout", o.stop_timeout_s,
                 "after SIGTERM/SIGINT/SIGUSR1/SIGUSR2, seconds the batch in flight may still run before it is "
                 "abandoned (0: at once); its items are left to the next run")
      ->capture_default_str();
  app.add_option("--encode-chunk", o.encode_chunk,
                 "two-phase chunks: encode the prompts of the next whole batches of up to N items, release the text "
                 "encoders, then denoise and decode those items with the denoiser back, so that the two are never "
                 "on the device together; N bounds the host memory the encodings wait in; 0: off, every module "
                 "stays on the device")
      ->capture_default_str();
  app.add_option("--offload", o.offload,
                 "none (every module on the device), model (each component in host memory, moved whole to the "
                 "device while it runs, as diffusers' enable_model_cpu_offload) or blocks[:N] (the denoiser's "
                 "transformer blocks, and T5's and the Qwen text encoders' layers, in host memory, N a group (default "
                 "1), each group copied to the device while "
                 "it runs and the next one prefetched on a side CUDA stream, as diffusers' apply_group_offloading "
                 "block_level with use_stream; DiT families only); the pixels are the same")
      ->capture_default_str();
  app.add_option("--max-device-memory", o.max_device_memory,
                 "GB or auto: plan each rank's memory to fit this budget (auto: the device's free memory less a "
                 "margin). Levers left at their defaults are added in order of cost until the estimate fits: "
                 "two-phase encoding, --offload model, --offload blocks, then what changes pixels, --vae-tiling "
                 "and --weight-storage fp8-denoiser or fp8. A run that cannot fit is refused at the start (exit 4); "
                 "allocations are capped at the budget (on the CPU too, where the device is the host memory)");
  app.add_flag("--exact", o.exact,
               "with --max-device-memory: never choose what changes pixels (VAE tiling, fp8 storage); refuse instead");
  app.add_option("--write-queue", o.write_queue,
                 "images that may wait for the writer thread (PNG, fsync, rename, manifest record) while the next "
                 "batch denoises; 0: write each batch before the next one starts")
      ->capture_default_str();
  app.add_option("--image-format", o.image_format,
                 "png (lossless), jpeg or webp (smaller files; the pixels get their loss, unless --webp-lossless); "
                 "files 000000.png, 000000.jpg or 000000.webp")
      ->capture_default_str();
  app.add_option("--jpeg-quality", o.jpeg_quality, "JPEG quality, 1..100 (chroma subsampled at 90 and below)")
      ->capture_default_str();
  app.add_option("--webp-quality", o.webp_quality, "lossy WebP quality, 0..100")->capture_default_str();
  app.add_flag("--webp-lossless", o.webp_lossless, "WebP without loss: the exact pixels, in smaller files than PNG's");
  app.add_option("--layout", o.layout,
                 "flat (OUT/000000.png, ...), or the tree a benchmark's evaluation reads: geneval "
                 "(OUT/<prompt line>/samples/<n>.png and the line's metadata.jsonl; implies --keep-fields) or "
                 "t2i-compbench (OUT/samples/<prompt>_<index>.png), dpg (OUT/grids/<id>.png, 2x2 grids of "
                 "OUT/samples/<id>_<j>.png; needs --num-images 4), or webdataset (OUT/<key>.tar shards of image, "
                 ".txt and .json per item, --shard-size items each)")
      ->capture_default_str();
  app.add_option("--shard-size", o.shard_size, "--layout webdataset: items per shard, 1..1000000")
      ->capture_default_str();
  app.add_option("--files-per-dir", o.files_per_dir,
                 "N > 0: item i goes to a numbered subdirectory, OUT/<i / N, 5 digits>/<i, 6 digits>.png "
                 "(00001/012345.png for N 10000), for filesystems slow with millions of files in one directory; "
                 "0: all in OUT")
      ->capture_default_str();
  app.add_option("--max-failures-in-a-row", o.max_failures_in_a_row,
                 "stop the run (exit 1) when a rank has this many failed items in a row, as a cause that fails "
                 "them all would fail the rest; the next run retries them; 0: never stop")
      ->capture_default_str();
  app.add_flag("--verbose,-v", o.verbose, "debug logging (per-rank progress)");
  app.add_option("--config", o.config, "JSON file with defaults for any of these options");
  app.add_flag("--dry-run", o.dry_run,
               "check the options (and --config) and exit 0, printing the resolved options as JSON: no prompts "
               "file or model is read, nothing is written, no worker starts");
}

/// "--key value" words for the keys of the --config file.
std::vector<std::string> config_words(const std::string& path, CLI::App& app) {
  const std::string file = "--config " + quote(path);
  std::string text, why;
  if (read_whole_file(path, io::kMaxJsonFileBytes, &text, &why) != ReadStatus::kOk)
    throw UsageError("--config: cannot read " + quote(path) + ": " + why);
  nlohmann::json j;
  try {
    j = io::parse_json_text(text, io::JsonDialect::kStrict, /*unique_keys=*/true);
  } catch (const io::JsonDuplicateKey& e) {
    throw UsageError(file + ": key " + quote(e.key(), 60) + " appears twice; keep one");
  } catch (const io::JsonSyntaxError& e) {
    // "at line 1, column 12: syntax error ..." from nlohmann, or "nested deeper than ...".
    const std::string reason = e.what();
    throw UsageError(file + ": not JSON (" + (reason.rfind("at line ", 0) == 0 ? "parse error " : "") + reason +
                     "); expected one object such as {\"steps\": 30}");
  }
  if (!j.is_object())
    throw UsageError(file + ": expected one JSON object such as {\"steps\": 30}, got " + std::string(j.type_name()));
  std::vector<std::string> words;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string given = quote(it.key(), 60);
    std::string key = it.key();
    for (char& c : key)
      if (c == '_') c = '-';
    if (key == "prompts" || key == "config")
      throw UsageError(file + ": key " + given + " cannot be set from a config file");
    if (key == "loras" || key == "lora") {
      // {"loras": [{"path": ..., "scale": ...}, "PATH[:SCALE]"]} or {"lora": "PATH[:SCALE]"}
      const nlohmann::json list = it.value().is_array() ? it.value() : nlohmann::json::array({it.value()});
      io::LoraSet set;
      try {
        set = io::lora_set_from_json(list, file);
      } catch (const InputError& e) {
        throw UsageError(e.what());
      }
      for (const io::LoraRef& ref : set) words.insert(words.end(), {"--lora", ref.path + ":" + fmt::format("{}", ref.scale)});
      continue;
    }
    if (key == "settings" || key == "scheduler-settings") {
      const bool scheduler = key != "settings";
      if (!it.value().is_object())
        throw UsageError(file + ": " + given + " must be an object such as " +
                         (scheduler ? "{\"timestep_spacing\": \"trailing\"}" : "{\"clip_skip\": 1}") + ", got " +
                         io::json_brief(it.value()));
      for (const auto& [name, value] : it.value().items())
        words.insert(words.end(), {scheduler ? "--scheduler-set" : "--set",
                                   name + "=" + value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
      continue;
    }
    CLI::Option* opt = nullptr;
    try {
      // Only plain option names: CLI11 would also find "-m" or "--out,-o" style names.
      if (key.empty() || key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
        throw CLI::OptionNotFound(key);
      opt = app.get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      throw UsageError(file + ": unknown key " + given + "; see 'dpinfer generate --help'");
    }
    const auto& v = it.value();
    const std::string where = file + ": " + given;
    if (opt->get_expected_min() == 0 && !v.is_boolean())
      throw UsageError(where + " is a flag: give true or false, got " + io::json_brief(v));
    // CLI11 would say "Could not convert: --steps = 3.5", naming neither the file nor the key.
    const std::string type = opt->get_type_name();
    if (type == "INT" && !v.is_number_integer())
      throw UsageError(where + " must be an integer, got " + io::json_brief(v));
    if (type == "FLOAT" && !v.is_number()) throw UsageError(where + " must be a number, got " + io::json_brief(v));
    if (v.is_boolean()) {
      if (opt->get_expected_min() != 0) throw UsageError(where + " takes a value, not true/false");
      if (v.get<bool>()) words.push_back("--" + key);
    } else if (v.is_string()) {
      words.insert(words.end(), {"--" + key, v.get<std::string>()});
    } else if (v.is_number()) {
      words.insert(words.end(), {"--" + key, v.dump()});
    } else {
      throw UsageError(where + " must be a string, number or boolean, got " + io::json_brief(v));
    }
  }
  return words;
}


}  // namespace

nlohmann::json parse_key_values(const std::vector<std::string>& words, const std::string& option,
                                const std::string& example) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& kv : words) {
    const size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos)
      throw UsageError(option + " " + quote(kv, 60) + ": expected KEY=VALUE, e.g. " + option + " " + example);
    nlohmann::json value;
    try {
      value = io::parse_json_text(kv.substr(eq + 1), io::JsonDialect::kStrict);
    } catch (const io::JsonSyntaxError&) {
      value = kv.substr(eq + 1);
    }
    if (value.is_object()) value = kv.substr(eq + 1);  // a list stays a list (skip_guidance_layers=[7,8,9])
    out[kv.substr(0, eq)] = value;
  }
  return out;
}

nlohmann::json lora_set_json(const io::LoraSet& set) {
  nlohmann::json j = nlohmann::json::array();
  for (const io::LoraRef& r : set) j.push_back({{"path", r.path}, {"scale", r.scale}});
  return j;
}

nlohmann::json GenerateOptions::to_json() const {
  nlohmann::json j = {{"prompts", prompts}, {"model", model}, {"variant", variant},
                      {"base", base}, {"text_encoder", text_encoder}, {"text_encoder_2", text_encoder_2},
                      {"vae", vae}, {"out", out},
                      {"seed", seed}, {"seed_from", seed_from}, {"num_images", num_images.value_or(1)},
                      {"negative_prompt", negative_prompt}, {"image", image}, {"mask", mask},
                      {"scheduler", scheduler}, {"scheduler_settings", scheduler_settings},
                      {"dtype", dtype}, {"vae_tiling", vae_tiling}, {"device", device}, {"weight_storage", weight_storage},
                      {"attention_backend", attention_backend}, {"channels_last", channels_last},
                      {"fp8_compute", fp8_compute}, {"cuda_graphs", cuda_graphs}, {"batch_size", batch_size},
                      {"shard_mode", shard_mode}, {"shard", shard}, {"overwrite", overwrite},
                      {"settings", settings},
                      {"loras", lora_set_json(loras)},
                      {"requeue_on_signal", requeue_on_signal}, {"stop_timeout", stop_timeout_s},
                      {"write_queue", write_queue}, {"encode_chunk", encode_chunk}, {"offload", offload},
                      {"max_device_memory", max_device_memory}, {"exact", exact},
                      {"max_failures_in_a_row", max_failures_in_a_row},
                      {"image_format", image_format}, {"jpeg_quality", jpeg_quality},
                      {"webp_quality", webp_quality}, {"webp_lossless", webp_lossless},
                      {"files_per_dir", files_per_dir}, {"layout", layout}, {"shard_size", shard_size},
                      {"config", config}, {"prompt_column", prompt_column}, {"keep_fields", keep_fields}};
  j["steps"] = steps ? nlohmann::json(*steps) : nlohmann::json();
  j["guidance_scale"] = guidance_scale ? nlohmann::json(*guidance_scale) : nlohmann::json();
  j["width"] = width ? nlohmann::json(*width) : nlohmann::json();
  j["height"] = height ? nlohmann::json(*height) : nlohmann::json();
  j["strength"] = strength ? nlohmann::json(*strength) : nlohmann::json();
  return j;
}

std::string generate_options_markdown() {
  GenerateOptions o;
  SettingArgs settings;
  CLI::App app;
  add_options(app, o, settings);
  return options_markdown(app);
}

std::vector<std::string> generate_option_names() {
  GenerateOptions o;
  SettingArgs settings;
  CLI::App app;
  add_options(app, o, settings);
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
    for (const auto& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

GenerateOptions parse_generate_args(const std::vector<std::string>& args, std::string* help) {
  GenerateOptions o;
  SettingArgs settings;
  CLI::App app("Generates the images of a prompts file: one worker (rank from the environment).", "dpinfer generate");
  add_options(app, o, settings);
  for (CLI::Option* opt : app.get_options()) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // --set is repeatable, each KEY=VALUE kept; later ones (the command line after --config) win per key.
  for (const char* kv : {"--set", "--scheduler-set"})
    app.get_option(kv)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->expected(1)->allow_extra_args(false);
  // One value per occurrence: a vector option would otherwise also take the words after its
  // value (the PROMPTS positional after --config's words, which go first).
  app.get_option("--lora")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->expected(1)->allow_extra_args(false);
  std::vector<std::string> words = args;
  size_t config_loras = 0;  // --lora words that came from --config: the command line's replace them
  // A first pass finds --config; its keys go before the command line, which so wins.
  if (std::count_if(args.begin(), args.end(), [](const std::string& a) {
        return a == "--config" || a.rfind("--config=", 0) == 0;
      }) > 1)
    throw UsageError("--config given more than once; merge the files into one");
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--config") {
      auto extra = config_words(args[i + 1], app);
      config_loras = static_cast<size_t>(std::count(extra.begin(), extra.end(), std::string("--lora")));
      words.insert(words.begin(), extra.begin(), extra.end());
      break;
    }
    if (args[i].rfind("--config=", 0) == 0) {
      auto extra = config_words(args[i].substr(9), app);
      config_loras = static_cast<size_t>(std::count(extra.begin(), extra.end(), std::string("--lora")));
      words.insert(words.begin(), extra.begin(), extra.end());
      break;
    }
  }
  std::vector<std::string> reversed(words.rbegin(), words.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    if (help) *help = app.help();
    return o;
  } catch (const CLI::ExtrasError&) {
    throw UsageError(unexpected_arguments(app) + "; see 'dpinfer generate --help'");
  } catch (const CLI::ParseError& e) {
    // CLI11 quotes the value it could not take: escape it and cut it short.
    throw UsageError(printable(one_line(e.what()), 300) + "; see 'dpinfer generate --help'");
  }
  if (o.seed < 0) throw UsageError("--seed: expected 0 or more, got " + std::to_string(o.seed));
  if (o.guidance_scale && !std::isfinite(*o.guidance_scale))
    throw UsageError("--guidance-scale: expected a finite number, got " + std::to_string(*o.guidance_scale));
  if (o.strength && !(*o.strength > io::kStrengthMin && *o.strength <= io::kStrengthMax))
    throw UsageError("--strength: expected a number in (0, 1], got " + fmt::format("{}", *o.strength));
  o.settings = parse_key_values(settings.set, "--set", "clip_skip=1");
  o.scheduler_settings = parse_key_values(settings.scheduler_set, "--scheduler-set", "timestep_spacing=trailing");
  if (config_loras && settings.lora.size() > config_loras)
    settings.lora.erase(settings.lora.begin(), settings.lora.begin() + static_cast<std::ptrdiff_t>(config_loras));
  for (const std::string& arg : settings.lora) {
    try {
      o.loras.push_back(io::parse_lora_arg(arg, "--lora"));
    } catch (const InputError& e) {
      throw UsageError(e.what());
    }
  }
  if (settings.guidance_rescale) {
    if (!std::isfinite(*settings.guidance_rescale) || *settings.guidance_rescale < 0)
      throw UsageError("--guidance-rescale: expected a finite number >= 0 (0 = off), got " +
                       std::to_string(*settings.guidance_rescale));
    o.settings["guidance_rescale"] = *settings.guidance_rescale;
  }
  if (o.batch_size < 1) throw UsageError("--batch-size: expected at least 1, got " + std::to_string(o.batch_size));
  if (settings.clip_skip) {
    if (*settings.clip_skip < 0)
      throw UsageError("--clip-skip: expected 0 or more, got " + std::to_string(*settings.clip_skip));
    o.settings["clip_skip"] = *settings.clip_skip;
  }
  if (o.stop_timeout_s < 0)
    throw UsageError("--stop-timeout: expected 0 or more seconds, got " + std::to_string(o.stop_timeout_s));
  if (o.encode_chunk < 0 || o.encode_chunk > kMaxEncodeChunk)
    throw UsageError("--encode-chunk: expected 0 (off) to " + std::to_string(kMaxEncodeChunk) + " items, got " +
                     std::to_string(o.encode_chunk));
  if (o.write_queue < 0 || o.write_queue > kMaxWriteQueue)
    throw UsageError("--write-queue: expected 0 (write in the denoising thread) to " + std::to_string(kMaxWriteQueue) +
                     " images, got " + std::to_string(o.write_queue));
  if (o.max_failures_in_a_row < 0)
    throw UsageError("--max-failures-in-a-row: expected 0 (never stop) or more items, got " +
                     std::to_string(o.max_failures_in_a_row));
  if (o.rendezvous_timeout_s < 1)
    throw UsageError("--rendezvous-timeout: expected at least 1 second, got " + std::to_string(o.rendezvous_timeout_s));
  // The bounds a JSONL line has (io/prompt_file.h), so that a value is refused the same
  // way wherever it is given.
  for (auto [name, v] : {std::pair<const char*, std::optional<int>>{"--width", o.width}, {"--height", o.height}}) {
    if (v && (!io::kImageSizeRange.contains(*v) || *v % 8 != 0))
      throw UsageError(std::string(name) + ": expected a multiple of 8 in " + io::kImageSizeRange.text() + ", got " +
                       std::to_string(*v));
  }
  if (o.num_images && !io::kImagesPerLineRange.contains(*o.num_images))
    throw UsageError("--num-images: expected " + io::kImagesPerLineRange.text() + " images per prompt, got " +
                     std::to_string(*o.num_images));
  if (o.steps && !io::kStepsRange.contains(*o.steps))
    throw UsageError("--steps: expected " + io::kStepsRange.text() + ", got " + std::to_string(*o.steps));
  parse_seed_from(o.seed_from);
  o.image_format = to_string(parse_image_format(o.image_format));  // jpg -> jpeg
  if (o.jpeg_quality < 1 || o.jpeg_quality > 100)
    throw UsageError("--jpeg-quality: expected 1..100, got " + std::to_string(o.jpeg_quality));
  if (o.webp_quality < 0 || o.webp_quality > 100)
    throw UsageError("--webp-quality: expected 0..100, got " + std::to_string(o.webp_quality));
  const Layout layout = parse_layout(o.layout);
  if (layout == Layout::kWebDataset && o.overwrite)
    throw UsageError("--overwrite: a WebDataset shard is not rewritten in place, and a remade item would then be in two "
                     "shards; give another --out");
  if (o.shard_size < 1 || o.shard_size > 1000000)
    throw UsageError("--shard-size: expected 1..1000000 items per shard, got " + std::to_string(o.shard_size));
  if (layout != Layout::kFlat && o.files_per_dir != 0)
    throw UsageError("--files-per-dir: the " + o.layout + " layout names its own directories; drop --files-per-dir");
  if (layout == Layout::kGeneval && o.image_format != "png")
    throw UsageError("--image-format " + o.image_format +
                     ": GenEval's evaluate_images.py reads only <n>.png files; drop --image-format with --layout geneval");
  if (layout == Layout::kDpgBench && o.image_format != "png")
    throw UsageError("--image-format " + o.image_format +
                     ": --layout dpg composes its grids from PNGs; drop --image-format with --layout dpg");
  if (o.files_per_dir < 0 || o.files_per_dir > kMaxFilesPerDir)
    throw UsageError("--files-per-dir: expected 0 (all images in --out) or 1.." + std::to_string(kMaxFilesPerDir) +
                     ", got " + std::to_string(o.files_per_dir));
  if (o.dtype != "auto" && o.dtype != "fp32" && o.dtype != "fp16" && o.dtype != "bf16")
    throw UsageError("--dtype: expected auto, fp32, fp16 or bf16, got " + quote(o.dtype, 60));
  parse_offload(o.offload);
  parse_device_memory(o.max_device_memory);
  if (o.exact && o.max_device_memory.empty())
    throw UsageError("--exact: it says what --max-device-memory's plan may choose; give --max-device-memory GB|auto too");
  if (o.weight_storage != "default" && o.weight_storage != "fp8" && o.weight_storage != "fp8-denoiser")
    throw UsageError("--weight-storage: expected default, fp8 or fp8-denoiser, got " + quote(o.weight_storage, 60));
  if (o.attention_backend != "auto" && o.attention_backend != "flash" && o.attention_backend != "efficient" &&
      o.attention_backend != "cudnn" && o.attention_backend != "math")
    throw UsageError("--attention-backend: expected auto, flash, efficient, cudnn or math, got " +
                     quote(o.attention_backend, 60));
  if (o.fp8_compute != "off" && o.fp8_compute != "tensorwise" && o.fp8_compute != "rowwise")
    throw UsageError("--fp8-compute: expected off, tensorwise or rowwise, got " + quote(o.fp8_compute, 60));
  if (o.device != "auto" && o.device != "cuda" && o.device != "cpu")
    throw UsageError("--device: expected auto, cuda or cpu, got " + quote(o.device, 60));
  return o;
}

io::PromptFileOptions prompt_file_options(const GenerateOptions& o) {
  io::PromptFileOptions p;
  p.jsonl_stdin = o.jsonl_stdin;
  p.prompt_column = o.prompt_column;
  // GenEval's metadata lines carry tag, include and exclude, which its layout writes back.
  p.keep_fields = o.keep_fields || o.layout == "geneval";
  p.reserved_field = is_record_field;
  return p;
}

std::optional<double> parse_device_memory(const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value == "auto") return 0.0;
  char* end = nullptr;
  const double gb = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !(gb > 0) || gb > 1e6)
    throw UsageError("--max-device-memory " + quote(value, 60) +
                     ": expected a number of GB above 0 (e.g. 22.5) or auto (the device's free memory)");
  return gb * 1e9;
}

OffloadChoice parse_offload(const std::string& value) {
  OffloadChoice c;
  if (value == "none" || value == "model" || value == "blocks") {
    c.mode = value;
    return c;
  }
  const std::string prefix = "blocks:";
  if (value.rfind(prefix, 0) == 0) {
    const std::string n = value.substr(prefix.size());
    if (!n.empty() && n.size() <= 6 && std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
        std::stoi(n) >= 1) {
      c.mode = "blocks";
      c.blocks_per_group = std::stoi(n);
      return c;
    }
    throw UsageError("--offload " + quote(value, 60) + ": expected blocks:N with N a whole number of blocks a group "
                     "from 1 to 999999, e.g. --offload blocks:2");
  }
  throw UsageError("--offload: expected none, model, blocks or blocks:N, got " + quote(value, 60));
}

}  // namespace dpinfer::plan

#pragma once
// The options of `dpinfer generate`, from the command line and --config FILE.json.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/io/prompt_file.h"

namespace dpinfer::plan {

/// The largest --write-queue: 1024 images at 1024x1024 already hold 3 GiB.
constexpr int kMaxWriteQueue = 1024;
/// --encode-chunk's bound: a million items' encodings are terabytes for T5.
constexpr int kMaxEncodeChunk = 1000000;

struct GenerateOptions {
  std::string prompts;           ///< file, or "-" for stdin
  bool jsonl_stdin = false;      ///< stdin holds JSONL (--jsonl)
  std::string prompt_column = "prompt";  ///< a CSV/TSV prompts file's prompt column (--prompt-column)
  bool keep_fields = false;      ///< unknown JSONL keys / CSV columns go into the records (--keep-fields)
  std::string model;             ///< directory or hub id; empty: the default model
  std::string variant;           ///< e.g. "fp16"
  /// What completes a single-file --model (pipeline/single_file/single_file.h): the diffusers
  /// pipeline whose configs and missing components it uses, and component folders.
  std::string base;
  std::string text_encoder;
  std::string text_encoder_2;
  std::string vae;
  std::string out = "outputs";
  int64_t seed = 0;
  std::string seed_from = "index";  ///< index or prompt (plan::SeedFrom)
  /// Images of a prompt line that sets no num_images (1 when not given; `dpinfer status`
  /// then takes the run's, from run.json).
  std::optional<int> num_images;
  std::optional<int> steps;
  std::optional<double> guidance_scale;
  std::optional<int> width;
  std::optional<int> height;
  std::string negative_prompt;
  /// --image: the input image of lines that set none (img2img; resolved against the current
  /// directory); empty: text-to-image for those lines.
  std::string image;
  /// --strength: img2img strength of lines that set none; unset: the model family's default.
  std::optional<double> strength;
  /// --mask: the inpainting mask of lines that set none (with an image); empty: none.
  std::string mask;
  std::string scheduler;         ///< empty: the model's own
  /// --scheduler-set KEY=VALUE: scheduler_config.json keys for this run (pipeline/scheduler_settings.h).
  nlohmann::json scheduler_settings = nlohmann::json::object();
  std::string dtype = "auto";    ///< auto, fp32, fp16, bf16
  /// --vae-tiling: decode in overlapping, blended tiles (diffusers' vae.enable_tiling()).
  bool vae_tiling = false;
  std::string device = "auto";   ///< auto, cuda, cpu
  /// default, fp8 or fp8-denoiser: how the weights are kept between uses (pipeline::LoadRequest).
  std::string weight_storage = "default";
  /// --attention-backend: auto, flash, efficient, cudnn or math (pipeline::LoadRequest, nn/sdpa_backend.h).
  std::string attention_backend = "auto";
  /// --channels-last: the denoiser's and the VAE's convolutions in channels-last memory format.
  bool channels_last = false;
  /// --fp8-compute: off, tensorwise or rowwise (pipeline::LoadRequest, nn::LinearImpl::compute_in_fp8).
  std::string fp8_compute = "off";
  /// --cuda-graphs: the denoiser's calls captured and replayed as CUDA graphs (pipeline::LoadRequest).
  bool cuda_graphs = false;
  int batch_size = 1;
  std::string shard_mode = "contiguous";
  std::string shard;             ///< "I/N"; empty: the whole file
  bool overwrite = false;
  /// The model family's settings for the run, from --set KEY=VALUE, the named flags that
  /// set one (--clip-skip, --guidance-rescale) and --config's "settings" object. Checked
  /// against the family once the model is loaded.
  nlohmann::json settings = nlohmann::json::object();
  /// --lora PATH[:SCALE] (repeatable) or --config's "loras": the LoRAs of every item whose
  /// prompts line names none, in merge order; paths as given.
  io::LoraSet loras;
  int rendezvous_timeout_s = 300;
  /// Inside a SLURM job, when SIGTERM/SIGUSR1/SIGUSR2 stopped the run: rank 0 runs
  /// `scontrol requeue` for this job (or job array task) on its way out.
  bool requeue_on_signal = false;
  /// After SIGTERM/SIGINT/SIGUSR1/SIGUSR2, how long the batch in flight may still run
  /// before it is abandoned between two denoising steps (its items are then made by
  /// the next run). Bounds the stop well under SLURM's KillWait (30 s).
  int stop_timeout_s = 10;
  /// How many finished images may wait for the writer thread (PNG encoding, fsync,
  /// rename, manifest record) while the next batch denoises (worker/write_queue.h);
  /// each holds width*height*3 bytes. 0: no writer thread, each batch is written
  /// before the next one starts (the serial loop).
  int write_queue = 16;
  /// Two-phase chunks (issue 26; pipeline::TextToImage::prepare): a rank encodes the prompts of
  /// its next whole batches of up to this many items (one batch at least), releases the text encoders, then
  /// denoises and decodes them; the encodings wait in host memory. 0: off. It changes no pixel,
  /// so it is no part of what resume compares.
  int encode_chunk = 0;
  /// --offload (issue 26 item 4): none, model or blocks[:N] (parse_offload). Where the weights wait
  /// between uses changes no pixel, so it is no part of what resume compares.
  std::string offload = "none";
  /// --max-device-memory (issue 26 item 6): "" (no plan), "auto" (the device's free memory at the start,
  /// less a margin) or a number of GB (10^9 bytes). A rank then plans its memory (pipeline/memory_plan.h):
  /// it adds the levers left at their defaults (two-phase, offload, tiling, fp8 storage, in that order of
  /// cost) until its estimate fits, refuses to start when none does, and caps its allocations there.
  std::string max_device_memory;
  /// --exact: the plan never chooses what changes pixels (VAE tiling, fp8 storage); it refuses instead.
  bool exact = false;
  /// A rank that records this many failed items in a row (none made between them)
  /// stops the run with exit 1: a cause that fails every item (a size the model cannot
  /// make, a broken CUDA context) must not turn a million items into a million failure
  /// records. Its failures stay recorded; the next run retries them. 0: never stop.
  int max_failures_in_a_row = 20;
  /// png (lossless, the default), jpeg at jpeg_quality, or webp at webp_quality or lossless
  /// (plan::parse_image_format).
  std::string image_format = "png";
  int jpeg_quality = 95;
  int webp_quality = 90;
  bool webp_lossless = false;
  /// --files-per-dir: N > 0 puts item i in OUT/<i / N>/ (plan::item_file_name); 0, the default, in OUT.
  int64_t files_per_dir = 0;
  /// --layout: flat, geneval, t2i-compbench, dpg or webdataset (plan::Layout).
  std::string layout = "flat";
  /// --shard-size: items per WebDataset shard (--layout webdataset); img2dataset writes 10000, a
  /// smaller shard loses less to a kill and suits small runs.
  int64_t shard_size = 1000;
  bool verbose = false;
  /// --dry-run: check the command line (options, values, their combinations, --config) and exit 0,
  /// reading no prompts file or model, writing nothing, starting no worker and looking at no device.
  /// Not part of a run: to_json() leaves it out.
  bool dry_run = false;
  std::string config;            ///< the --config file, if any

  /// The resolved options as JSON (run.json).
  nlohmann::json to_json() const;
};

/// `set` as JSON: [{"path": ..., "scale": ...}], as run.json and the records hold it.
nlohmann::json lora_set_json(const io::LoraSet& set);

/// Parses `dpinfer generate` arguments (without the program and subcommand).
/// A --config FILE.json supplies defaults for any option (same names, with '-' or
/// '_'); the command line overrides it. Throws UsageError with a hint; sets `help`
/// instead when --help was asked for.
GenerateOptions parse_generate_args(const std::vector<std::string>& args, std::string* help = nullptr);

/// Every generate option as a Markdown table (util/cli_reference.h), for the option reference.
std::string generate_options_markdown();

/// Every spelling of every generate option ("--steps", "-v", ...), for the launcher
/// to tell its own options from the workers'.
std::vector<std::string> generate_option_names();

/// How `o` reads its prompts file: --jsonl, --prompt-column, --keep-fields, and the record's
/// own keys (plan/record_fields.h), which a kept field may not have.
io::PromptFileOptions prompt_file_options(const GenerateOptions& o);

/// The KEY=VALUE words of a repeatable `option` (--set, --scheduler-set) as one object, later
/// keys winning. A value is a number, true/false or a list as JSON reads them; anything else is
/// the string, for the family's or the scheduler's check to refuse by name. Throws UsageError
/// for a word without KEY=, showing `example`.
nlohmann::json parse_key_values(const std::vector<std::string>& words, const std::string& option,
                                const std::string& example);


/// --offload's value: "none", "model", or "blocks" with its blocks a group ("blocks:N"; 1 when no N).
struct OffloadChoice {
  std::string mode = "none";
  int blocks_per_group = 1;
};
/// Parses --offload's value; throws UsageError naming the option and its values.
OffloadChoice parse_offload(const std::string& value);

/// --max-device-memory's value in bytes: unset for "" (no plan), 0 for "auto", else GB x 10^9. Throws
/// UsageError naming the option.
std::optional<double> parse_device_memory(const std::string& value);

}  // namespace dpinfer::plan

#include "dpinfer/worker/generate_run.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <unistd.h>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/lora_file.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/plan/manifest_names.h"
#include "dpinfer/plan/preflight.h"
#include "dpinfer/plan/run_token.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/exit_status.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/signal_names.h"
#include "dpinfer/util/strings.h"
#include "dpinfer/util/version.h"
#include "dpinfer/worker/default_model.h"
#include "dpinfer/worker/devices.h"
#include "dpinfer/worker/image_metadata.h"
#include "dpinfer/worker/stop_signals.h"

namespace dpinfer::worker {
namespace {

namespace fs = std::filesystem;
using plan::choose_outer_shard;
using plan::dynamic_chunk_size;
using plan::Item;
using plan::item_file_name;
using plan::ItemDefaults;
using plan::manifest_file_name;
using plan::OuterShard;
using plan::OuterShardChoice;
using plan::parse_shard_mode;
using plan::rank_info_from_env;
using plan::ShardMode;
using plan::static_share;

/// How often a rank tells the launcher how far it is, at most.
constexpr auto kProgressInterval = std::chrono::milliseconds(250);

}  // namespace

bool is_disk_full(const std::exception& e) {
  const auto* system = dynamic_cast<const SystemError*>(&e);
  return system && (system->code() == ENOSPC || system->code() == EDQUOT);
}

int GenerateRun::run() {
  rank_ = rank_info_from_env(current_environment());
  if (rank_.rank == 0 && slurm_.in_job()) log::info("{}", slurm_.describe());
  // With peers on other nodes, node 0's launcher learns the run's totals only
  // through rank 0, which reads them from the store.
  multi_node_ = rank_.world_size > rank_.local_world_size;
  if (o_.prompts == "-" && rank_.world_size > 1)
    throw UsageError("prompts from stdin ('-') work with one rank only: every rank reads the same item list, and "
                     "ranks do not share one stdin; write the prompts to a file and pass its path");
  plan::check_prompts_path(o_.prompts);  // not a program, not a .json document (plan/preflight.h)
  auto specs = io::read_prompt_file(o_.prompts, plan::prompt_file_options(o_));
  if (specs.empty()) throw UsageError(quote(o_.prompts) + " holds no prompt (blank lines and # comments are skipped)");
  // The batches, from the lines as written (plan/batches.h): the same in every run of this
  // file at this --batch-size, whatever the world size, shard mode, shard or restart.
  batches_.emplace(specs, o_.num_images.value_or(1), o_.batch_size);
  io::LoraSet run_loras = o_.loras;
  resolve_lora_paths(specs, run_loras);
  const std::string run_image = resolve_image_paths(specs);
  // --shard, else a SLURM job array task's shard (sharding.h), else the whole file.
  const OuterShardChoice shard_choice = choose_outer_shard(o_.shard, current_environment());
  const OuterShard shard = shard_choice.shard;
  if (shard_choice.sharded && rank_.rank == 0)
    log::info("outer shard {}/{} from {}", shard.index, shard.count, shard_choice.source);
  mode_ = parse_shard_mode(o_.shard_mode);

  {
    std::error_code ec;
    fs::create_directories(o_.out, ec);
    if (ec || !fs::is_directory(o_.out))
      throw UsageError("--out " + quote(o_.out) + ": cannot make it a directory (" +
                       (ec ? ec.message() : std::string("a file of that name exists")) + "); give a directory");
    plan::check_output_dir(o_.out);  // writable, before the model loads
  }
  if (rank_.rank == 0) {
    // In --out and in the subdirectories a layout makes (of this run's layout or an earlier
    // one's), not in other trees under --out.
    size_t removed = io::remove_stale_temporaries(o_.out, plan::is_layout_dir_name);
    if (removed) log::info("removed {} stale temporary file(s) from an interrupted run", removed);
  }
  // Join before anything rank-specific can fail, so that such a failure reaches
  // the other ranks through the abort flag instead of leaving them waiting.
  WorkerGroup::Options go;
  go.timeout = std::chrono::seconds(o_.rendezvous_timeout_s);
  go.interrupted = [] { return stop_signal() != 0; };
  if (rank_.world_size > 1) {
    // From the launcher's environment, else from --out's token file (plan/run_token.h).
    const plan::RunToken token = plan::run_token(current_environment(), o_.out);
    go.run_token = token.value;
    go.run_token_source = token.source;
    log::debug("rank {}/{} ({}): rendezvous at {}:{} (from {})", rank_.rank, rank_.world_size, rank_.source,
               rank_.master_addr, rank_.master_port, rank_.master_from);
  }
  group_ = WorkerGroup::join(rank_, go);
  const std::string device = resolve_device(o_.device, rank_);
  if (device != "cpu") group_->join_nccl(std::stoi(device.substr(5)));  // "cuda:N"
  std::string model = resolve_embedded_model(o_.model);
  if (model.empty()) {
    model = default_model_dir();
    if (rank_.rank == 0) log::info("no --model: using the default model {}", model);
  } else if (model != o_.model && rank_.rank == 0) {
    log::info("--model {}: the embedded model {}", o_.model, model);
  }
  pipeline::LoadRequest req;
  req.model = model;
  req.variant = o_.variant;
  req.scheduler = o_.scheduler;
  req.dtype = resolve_dtype(o_.dtype, device);
  req.device = device;
  req.settings = o_.settings;
  req.base = o_.base;
  req.text_encoder = o_.text_encoder;
  req.text_encoder_2 = o_.text_encoder_2;
  req.vae = o_.vae;
  req.scheduler_settings = o_.scheduler_settings;
  req.weight_storage = o_.weight_storage;
  req.vae_tiling = o_.vae_tiling;
  req.attention_backend = o_.attention_backend;
  req.channels_last = o_.channels_last;
  req.fp8_compute = o_.fp8_compute;
  req.cuda_graphs = o_.cuda_graphs;
  const plan::OffloadChoice offload = plan::parse_offload(o_.offload);
  req.offload = offload.mode;
  req.offload_blocks_per_group = offload.blocks_per_group;
  encode_chunk_ = o_.encode_chunk;
  req.two_phase = encode_chunk_ > 0;
  if (const std::optional<double> budget = plan::parse_device_memory(o_.max_device_memory)) {
    // The largest item's size: the plan must fit every batch (a line may set its own).
    pipeline::MemoryRequest m;
    m.budget = *budget;
    m.exact = o_.exact;
    m.width = o_.width.value_or(0);
    m.height = o_.height.value_or(0);
    m.reference_images = o_.image.empty() ? 0 : 1;
    for (const io::PromptSpec& s : specs) {
      m.width = std::max<int64_t>(m.width, s.width.value_or(0));
      m.height = std::max<int64_t>(m.height, s.height.value_or(0));
      if (s.image) m.reference_images = std::max<int64_t>(m.reference_images, 1 + static_cast<int64_t>(s.more_images.size()));
      const bool with_image = s.image || !o_.image.empty();
      const bool unsized = !(s.width || o_.width) || !(s.height || o_.height);
      m.sizes_from_references = m.sizes_from_references || (with_image && unsized);
      // The LoRA sets, each once: the plan counts the largest.
      if (s.loras && !s.loras->empty() && std::find(m.lora_sets.begin(), m.lora_sets.end(), *s.loras) == m.lora_sets.end())
        m.lora_sets.push_back(*s.loras);
    }
    if (!run_loras.empty() && std::find(m.lora_sets.begin(), m.lora_sets.end(), run_loras) == m.lora_sets.end())
      m.lora_sets.push_back(run_loras);
    m.batch_size = o_.batch_size;
    m.encode_chunk = encode_chunk_ > 0 ? encode_chunk_ : std::max(64, o_.batch_size);
    req.memory = m;
  }
  log::debug("rank {}/{} ({}) on {}", rank_.rank, rank_.world_size, rank_.source, device);

  auto start = std::chrono::steady_clock::now();
  try {
    pipe_ = factory_(req);
  } catch (const c10::OutOfMemoryError& e) {
    out_of_memory("loading the model", e);
  }
  // What --max-device-memory's plan chose (load.h): two-phase turned on by it encodes its chunks here.
  memory_plan_ = pipe_->memory_plan();
  if (!memory_plan_.is_null()) {
    const nlohmann::json& levers = memory_plan_["record"]["levers"];
    if (levers.value("two_phase", false) && encode_chunk_ == 0)
      encode_chunk_ = levers.value("encode_chunk", 0) > 0 ? levers["encode_chunk"].get<int>() : req.memory->encode_chunk;
    const plan::OffloadChoice planned = plan::parse_offload(levers.value("offload", "none"));
    req.offload = planned.mode;
    req.offload_blocks_per_group = planned.blocks_per_group;
    if (rank_.rank == 0) log::info("{}", memory_plan_["summary"].get<std::string>());
  }
  // A batch is also cut short when the writer has failed (a full disk): the run stops.
  pipe_->set_cancel_check([this, grace = std::chrono::seconds(o_.stop_timeout_s)] {
    return stopping_for_at_least(grace) || (writer_ && writer_->failed());
  });
  const pipeline::PipelineInfo& info = pipe_->info();
  log::debug("pipeline loaded in {:.2f}s", seconds_since(start));
  if (rank_.rank == 0 && !info.ignored_components.empty())
    log::info("{}: not used by the {} pipeline: {}{}", info.model_name, info.family_label,
              join(info.ignored_components),
              std::any_of(info.ignored_components.begin(), info.ignored_components.end(),
                          [](const std::string& c) { return starts_with(c, "safety_checker"); })
                  ? " (dpinfer runs no safety checker)"
                  : "");

  ItemDefaults d;
  d.num_images = o_.num_images.value_or(1);
  d.negative_prompt = o_.negative_prompt;
  d.seed = o_.seed;
  d.steps = o_.steps.value_or(info.default_steps);
  d.guidance_scale = o_.guidance_scale.value_or(info.default_guidance_scale);
  d.width = o_.width.value_or(info.default_width);
  d.height = o_.height.value_or(info.default_height);
  d.settings = info.settings;
  d.seed_from = plan::parse_seed_from(o_.seed_from);
  d.loras = run_loras;
  d.image = run_image;
  d.strength = o_.strength.value_or(info.default_strength);
  d.mask = run_mask_;
  d.inpaint_strength = o_.strength.value_or(info.default_inpaint_strength);
  defaults_ = d;
  identity_ = identity_fields(info);
  // Rank 0 hashes before run.json; the others once rank 0 has (the cache is then there).
  if (rank_.rank == 0) compute_hashes(info, specs);
  // The items are made one by one when needed (plan/items.h): never all in memory.
  items_.emplace(std::move(specs), d);
  check_lines(info);
  total_items_ = items_->size();
  if (batches_->items() != total_items_)
    throw Error("the batch plan counts " + std::to_string(batches_->items()) + " items, the item list " +
                std::to_string(total_items_));
  // The outer shard takes whole batches: a contiguous run of them.
  const auto [shard_batch_begin, shard_batch_end] = batches_->shard_batches(shard);
  shard_batch_begin_ = shard_batch_begin;
  shard_batches_ = shard_batch_end - shard_batch_begin;
  const plan::ItemSpan shard_items = batches_->items_of(shard_batch_begin, shard_batch_end);
  shard_begin_ = shard_items.first;
  shard_size_ = shard_items.size;

  const std::string manifest_name =
      manifest_file_name(shard_choice.sharded ? std::optional<OuterShard>(shard) : std::nullopt, rank_.rank);
  manifest_ = std::make_unique<io::ManifestWriter>((fs::path(o_.out) / manifest_name).string());
  sink_ = make_output_sink({o_.out, layout_, o_.shard_size, rank_.rank, manifest_.get()});
  resume_.emplace(o_.out, layout_, *sink_);
  if (rank_.rank == 0) write_run_json(info, shard, nullptr);

  group_->barrier("model-loaded");
  if (rank_.rank != 0) compute_hashes(info, items_->specs());
  group_->device_barrier();
  if (rank_.rank == 0)
    log::info("{} item(s){} in {} batch(es) of up to {}, on {} rank(s), {} sharding", shard_size_,
              shard_choice.sharded ? " in shard " + std::to_string(shard.index) + "/" + std::to_string(shard.count)
                                   : "",
              shard_batches_, o_.batch_size, rank_.world_size, to_string(mode_));
  if (rank_.rank == 0 && req.offload != "none")
    log::info("--offload {}: {}{}", req.offload == "model" ? "model" : "blocks:" + std::to_string(req.offload_blocks_per_group),
              req.offload == "model" ? "each component is on the device only while it runs"
                                     : "the denoiser's blocks wait in host memory, " +
                                           std::to_string(req.offload_blocks_per_group) + " a group",
              device == "cpu" ? "; on the CPU the device is the host memory, so this saves no memory (the moves "
                                "are copies within it)"
                              : "");
  if (rank_.rank == 0 && encode_chunk_ > 0)
    log::info("two-phase chunks of up to {} item(s){}: the text encoders and the denoiser take the "
              "device in turn",
              encode_chunk_, o_.encode_chunk > 0 ? " (--encode-chunk)" : " (--max-device-memory's plan)");

  writer_ = std::make_unique<WriteQueue>(o_.write_queue);
  bool stopped = false;
  try {
    stopped = mode_ == ShardMode::kDynamic ? run_dynamic() : run_static();
  } catch (...) {
    finish_writing(/*rethrow=*/false);  // what is queued is made: write it (the first error wins)
    throw;
  }
  finish_writing(/*rethrow=*/true);
  if (remade_)
    log::info("rank {}: made {} item(s) again beside missing batch-mates, to keep their batches whole (their files "
              "were kept)", rank_.rank, remade_);
  stopped = stopped || stop_signal() != 0;
  // Stopped by a signal, the signal is the story (rank 0's store may be gone by now).
  if (!stopped)
    if (auto why = group_->abort_reason()) throw WorkerGroup::PeerFailed(*why);
  int status;
  try {
    status = stopped ? finish_stopped() : finish(info, shard);
  } catch (const WorkerGroup::Interrupted&) {
    status = finish_stopped();  // a signal came while waiting for the peers
    stopped = true;
  }
  report_progress(true);
  // Stopped by a signal, the peers are stopping too (or one died, and the launcher
  // stopped the rest): rank 0 does not wait for them (WorkerGroup::leave).
  group_->leave(std::chrono::seconds(stopped ? 0 : o_.rendezvous_timeout_s));
  return status;
}

void GenerateRun::check_lines(const pipeline::PipelineInfo& info) {
  // Per line, not per item: a line's items share its size and settings.
  const plan::ItemDefaults& d = items_->defaults();
  const auto resolve = [&](const nlohmann::json& settings, const std::string& where) {
    nlohmann::json checked = pipeline::resolve_settings(info.setting_specs, settings, where, info.family_label);
    try {
      pipe_->check_settings(checked);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    return checked;
  };
  // Every distinct LoRA set, read and checked once, before any item is made.
  std::vector<io::LoraSet> checked_sets;
  const auto check_loras = [&](const io::LoraSet& set, const std::string& where) {
    if (set.empty() || std::find(checked_sets.begin(), checked_sets.end(), set) != checked_sets.end()) return;
    try {
      pipe_->check_loras(set);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    checked_sets.push_back(set);
  };
  check_loras(d.loras, "--lora");
  line_settings_.assign(items_->specs().size(), nlohmann::json());
  const CheckLine check_layout_line = output_sink_row(layout_.layout).check_line;
  for (size_t k = 0; k < items_->specs().size(); ++k) {
    const io::PromptSpec& s = items_->specs()[k];
    const std::string where = quote(o_.prompts) + " line " + std::to_string(s.line);
    if (s.loras) check_loras(*s.loras, where);
    // A kept field (--keep-fields) named as one of this family's settings, which the
    // record holds too (the other record keys were refused as the file was read).
    for (const pipeline::SettingSpec& spec : info.setting_specs)
      if (s.fields.contains(spec.name))
        throw InputError(where + ": field " + quote(spec.name) + " is a setting of " + info.family_label +
                         " models, which dpinfer writes in each image's record itself, so --keep-fields cannot keep "
                         "it; rename it, or give it as {\"settings\": {\"" + spec.name + "\": ...}}");
    const int width = s.width.value_or(d.width), height = s.height.value_or(d.height);
    const bool masked = s.mask || !d.mask.empty();
    if (info.requires_mask && !(s.image || !d.image.empty()))
      throw UsageError(where + ": " + info.model_name + " is an inpainting model (" + info.pipeline_class +
                       "): every item needs an 'image' and a 'mask' (or --image and --mask)");
    if (info.requires_image && !(s.image || !d.image.empty()))
      throw UsageError(where + ": " + info.model_name + " is an edit model (" + info.pipeline_class +
                       "): every item needs an 'image' (or --image), the picture it edits");
    if (info.requires_mask && !masked)
      throw UsageError(where + ": " + info.model_name + " is an inpainting model (" + info.pipeline_class +
                       "): every item needs a 'mask' (or --mask) beside its image");
    if (info.image_is_reference && masked)
      throw UsageError(where + ": a mask for " + info.model_name + " (" + info.pipeline_class +
                       "), which takes its image as a reference to edit, not to inpaint; drop the mask");
    if (!s.more_images.empty() && !info.several_references)
      throw UsageError(where + ": 'image' lists " + std::to_string(1 + s.more_images.size()) + " images, and " +
                       info.model_name + " (" + info.pipeline_class + ") takes one" +
                       (info.image_is_reference ? " reference" : " input image") +
                       " per item; give one path (several references are FLUX.2's and Qwen-Image-Edit-2509's)");
    if (info.image_is_reference && (s.strength || o_.strength))
      throw UsageError(where + ": a strength for " + info.model_name + " (" + info.pipeline_class +
                       "), which takes its image as a reference to edit and starts from noise; drop the strength");
    if (masked && info.default_inpaint_strength <= 0)
      throw UsageError(where + ": a mask for a " + info.family_label + " model (" + info.pipeline_class +
                       "), which dpinfer does not inpaint with yet; drop the mask");
    if ((s.image || !d.image.empty()) && !info.image_is_reference) {
      if (info.default_strength <= 0 && !info.requires_mask)
        throw UsageError(where + ": an input image ('image' or --image) for a " + info.family_label + " model (" +
                         info.pipeline_class + "), which dpinfer runs text-to-image only; drop the image");
      // The schedule's steps from the image: diffusers' get_timesteps keeps about steps x strength
      // of them, and none below 1 (which diffusers refuses too, or fails on).
      const int steps = s.steps.value_or(d.steps);
      const double strength = s.strength.value_or(masked ? d.inpaint_strength : d.strength);
      if (steps * strength < 1)
        throw UsageError(where + ": strength " + fmt::format("{}", strength) + " of " + std::to_string(steps) +
                         " steps runs no denoising step (steps x strength < 1); raise the strength or the steps");
    }
    if (check_layout_line) check_layout_line(s, static_cast<int64_t>(k), d, where);  // what --layout needs of a line
    check_image_size(encoder_, width, height, where);          // what --image-format holds
    if (width % info.size_multiple || height % info.size_multiple)
      throw UsageError(where + ": size " + std::to_string(width) + "x" + std::to_string(height) +
                       " is not a multiple of " + std::to_string(info.size_multiple) + ", which " +
                       info.family_label + " models need");
    if (s.settings) {
      nlohmann::json settings = d.settings;
      settings.update(*s.settings);
      line_settings_[k] = resolve(settings, where);
    } else if (run_settings_.is_null()) {
      run_settings_ = resolve(d.settings, where);  // the same for every line without its own
    }
  }
}

void GenerateRun::resolve_lora_paths(std::vector<io::PromptSpec>& specs, io::LoraSet& run_loras) const {
  const auto resolve = [](io::LoraSet& set, const std::string& where) {
    for (io::LoraRef& ref : set) ref.path = io::find_lora_file(ref.path, where);
  };
  resolve(run_loras, "--lora");
  for (io::PromptSpec& s : specs)
    if (s.loras) resolve(*s.loras, quote(o_.prompts) + " line " + std::to_string(s.line));
}

std::string GenerateRun::resolve_image_paths(std::vector<io::PromptSpec>& specs) {
  const auto resolve = [](const std::string& path, const fs::path& base, const std::string& where) {
    fs::path p(path);
    if (p.is_relative()) p = base / p;
    std::error_code ec;
    p = fs::absolute(p, ec).lexically_normal();
    if (::access(p.c_str(), R_OK) != 0)
      throw UsageError(where + ": the input image " + quote(path) + " cannot be read (" + open_error_text(p.string(), errno) +
                       ")" + (path == p.string() ? "" : "; looked for " + quote(p.string())));
    if (fs::is_directory(p, ec)) throw UsageError(where + ": the input image " + quote(path) + " is a directory");
    return p.string();
  };
  const std::string run_image = o_.image.empty() ? "" : resolve(o_.image, fs::current_path(), "--image");
  run_mask_ = o_.mask.empty() ? "" : resolve(o_.mask, fs::current_path(), "--mask");
  if (!run_mask_.empty() && run_image.empty())
    throw UsageError("--mask: a mask is for items that start from an image; give --image too, or give each line an 'image'");
  // A line's image is relative to the prompts file's folder (the current directory for stdin).
  const fs::path base = o_.prompts == "-" ? fs::current_path() : fs::absolute(o_.prompts).parent_path();
  for (io::PromptSpec& s : specs) {
    const std::string where = quote(o_.prompts) + " line " + std::to_string(s.line);
    if (s.image) s.image = resolve(*s.image, base, where);
    for (std::string& more : s.more_images) more = resolve(more, base, where);
    if (s.mask) {
      if (!s.image && run_image.empty())
        throw UsageError(where + ": 'mask' is for items that start from an image; give the line an 'image' (or --image)");
      s.mask = resolve(*s.mask, base, where);
    }
    if (!s.image && s.strength && run_image.empty())
      throw UsageError(where + ": 'strength' is for items that start from an image; give the line an 'image' (or --image)");
  }
  return run_image;
}

void GenerateRun::compute_hashes(const pipeline::PipelineInfo& info, const std::vector<io::PromptSpec>& specs) {
  auto start = std::chrono::steady_clock::now();
  HashCache cache(o_.out);
  if (!info.hash_files.empty()) hashes_.model = cache.files_sha256(info.hash_files);
  const auto add = [&](const io::LoraSet& set) {
    for (const io::LoraRef& ref : set)
      if (!hashes_.loras.count(ref.path)) hashes_.loras[ref.path] = cache.lora_sha256(ref.path);
  };
  add(defaults_.loras);
  for (const io::PromptSpec& s : specs)
    if (s.loras) add(*s.loras);
  if (rank_.rank == 0) cache.save();
  log::debug("rank {}: model and LoRA hashes in {:.2f}s", rank_.rank, seconds_since(start));
}

void GenerateRun::abort(const std::string& why) {
  if (group_) group_->abort(why);
}

void GenerateRun::requeue_if_stopped(int status) const {
  int sig = stop_signal();
  if (o_.requeue_on_signal && sig != 0 && status == exit_status::kSignalBase + sig) requeue_slurm_job(slurm_, rank_.rank, sig);
}

void GenerateRun::report_progress(bool force) noexcept {
  if (!progress_.enabled() || !items_known_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_report_ < kProgressInterval) return;
  last_report_ = now;
  try {
    plan::ProgressReport r;
    r.rank = rank_.rank;
    r.world = rank_.world_size;
    r.counts = {stats_.generated, stats_.skipped, stats_.failed};
    r.todo = todo_;
    r.total = shard_size_;
    if (group_totals_) {
      r.group = group_totals_;
    } else if (multi_node_ && rank_.rank == 0 && group_) {
      r.group = plan::ProgressCounts{group_->add("done-items", 0), group_->add("skipped-items", 0),
                                         group_->add("failed-items", 0)};
    }
    progress_.write(plan::format_progress_report(r) + "\n");
  } catch (const std::exception& e) {
    log::debug("rank {}: no progress report: {}", rank_.rank, first_line(e.what()));
  }
}

Item GenerateRun::item_at(int64_t position) const {
  const int64_t index = shard_begin_ + position;
  Item it = items_->at(index);
  const size_t line_index = items_->spec_of(index);
  const nlohmann::json& line = line_settings_[line_index];
  it.settings = line.is_null() ? run_settings_ : line;  // as check_lines() completed them
  if (pipe_ && pipe_->info().size_from_reference && !it.image_path.empty()) {
    // FLUX.2: a side that neither the line nor the run sets is the first reference's (Qwen-Image-Edit-2509: the
    // last's), as reference_size() sizes it. A reference that cannot be read or sized leaves the default: making the
    // item then fails, naming why.
    const io::PromptSpec& spec = items_->specs()[line_index];
    const bool width_set = spec.width || o_.width, height_set = spec.height || o_.height;
    if (!width_set || !height_set) {
      try {
        const std::string& path = pipe_->info().size_from_last_reference && !it.more_image_paths.empty()
                                      ? it.more_image_paths.back()
                                      : it.image_path;
        const io::ImageDimensions own = input_images_.dimensions(path);
        const pipeline::ReferenceSize sized = pipe_->reference_size(own.width, own.height, it.settings);
        const std::array<int, 2> size = sized.item_size.value_or(sized.size);
        if (!width_set) it.width = size[0];
        if (!height_set) it.height = size[1];
      } catch (const Error&) {
        // image_request() reads the reference again and records the item as failed, with the file's reason.
      }
    }
  }
  return it;
}

void GenerateRun::add_input_hashes(Item& it) const {
  if (!it.image_path.empty() && it.image_sha256.empty()) it.image_sha256 = input_images_.sha256(it.image_path);
  if (it.more_image_sha256.size() != it.more_image_paths.size()) {
    it.more_image_sha256.clear();
    for (const std::string& path : it.more_image_paths) it.more_image_sha256.push_back(input_images_.sha256(path));
  }
  if (!it.mask_path.empty() && it.mask_sha256.empty()) it.mask_sha256 = input_images_.sha256(it.mask_path);
}

pipeline::ImageRequest GenerateRun::image_request(const Item& it, bool with_image) {
  pipeline::ImageRequest r;
  r.prompt = it.prompt;
  r.negative_prompt = it.negative_prompt;
  r.seed = static_cast<uint64_t>(it.seed);
  r.steps = it.steps;
  r.guidance_scale = it.guidance_scale;
  r.width = it.width;
  r.height = it.height;
  r.settings = it.settings;
  r.loras = it.loras;
  if (!it.image_path.empty()) {
    r.strength = it.strength;
    if (with_image && pipe_->info().image_is_reference) {
      // A reference (FLUX.1 Kontext, FLUX.2) is sized for its own size, not to the item's.
      const auto load_reference = [&](const std::string& path) {
        return input_images_.load(path, [&](int width, int height) {
          try {
            return pipe_->reference_size(width, height, it.settings);
          } catch (const InputError& e) {
            throw InputError(quote(path) + ": " + e.what());
          }
        });
      };
      r.image = load_reference(it.image_path);
      for (const std::string& path : it.more_image_paths) r.more_images.push_back(load_reference(path));
    } else if (with_image) {
      r.image = input_images_.load(it.image_path, it.width, it.height);
    }
    if (with_image && !it.mask_path.empty()) r.mask = input_images_.load_mask(it.mask_path, it.width, it.height);
  }
  return r;
}

bool GenerateRun::run_static() {
  // Whole batches of the shard (plan/batches.h): a contiguous run of them, or every
  // world-th one from this rank's (kStrided).
  const plan::StaticShare share = static_share(shard_batches_, rank_.world_size, rank_.rank, mode_);
  // Which of this rank's items an earlier run made, one bit each, in the order the batches
  // come: the count is known (logged, reported) before the first image, and no list of
  // items is kept.
  std::vector<bool> made;
  for (int64_t k = 0; k < share.size(); ++k) {
    const plan::ItemSpan span = batches_->at(shard_batch_begin_ + share.at(k));
    const std::vector<bool> in_batch = made_items(span);
    made.insert(made.end(), in_batch.begin(), in_batch.end());
    stats_.skipped += std::count(in_batch.begin(), in_batch.end(), true);
  }
  todo_ = static_cast<int64_t>(made.size());
  items_known_ = true;
  if (multi_node_ && stats_.skipped) group_->add("skipped-items", stats_.skipped);
  report_progress(true);
  if (stats_.skipped)
    log::info("rank {}: skipped {} item(s) whose {} exists (--overwrite regenerates them)", rank_.rank, stats_.skipped,
              plan::label_of(image_format_));
  int64_t k = 0;
  size_t bit = 0;  // the first bit of batch k in `made`
  return generate_all([&]() -> std::optional<BatchTodo> {
    while (k < share.size()) {
      BatchTodo todo{batches_->at(shard_batch_begin_ + share.at(k++)), {}};
      const auto first = made.begin() + static_cast<std::ptrdiff_t>(bit);
      todo.made.assign(first, first + todo.span.size);
      bit += static_cast<size_t>(todo.span.size);
      if (std::find(todo.made.begin(), todo.made.end(), false) != todo.made.end()) return todo;
    }
    return std::nullopt;
  });
}

bool GenerateRun::run_dynamic() {
  const int64_t n = shard_batches_;
  // With --encode-chunk a claim holds a two-phase chunk's batches at least (every rank claims alike).
  const int64_t chunk = std::max(dynamic_chunk_size(n, rank_.world_size),
                                 (int64_t{encode_chunk_} + o_.batch_size - 1) / o_.batch_size);
  items_known_ = true;  // todo_ stays -1: no rank knows its share in advance
  report_progress(true);
  int64_t skipped_in_all = 0;
  for (;;) {
    if (stop_signal()) return true;
    if (group_->abort_reason()) return false;
    // One claim: `chunk` whole batches of the shard.
    int64_t end = group_->add("next-batch", chunk);
    int64_t begin = end - chunk;
    if (begin >= n) break;
    std::vector<BatchTodo> todo;
    int64_t skipped = 0;
    for (int64_t b = begin; b < std::min(end, n); ++b) {
      const plan::ItemSpan span = batches_->at(shard_batch_begin_ + b);
      BatchTodo batch{span, made_items(span)};
      skipped += std::count(batch.made.begin(), batch.made.end(), true);
      if (std::find(batch.made.begin(), batch.made.end(), false) != batch.made.end()) todo.push_back(std::move(batch));
    }
    if (skipped) {
      skipped_in_all += skipped;
      // Counted by the writer, which alone touches the counts during the loop, in order.
      writer_->push(
          [this, skipped] {
            stats_.skipped += skipped;
            if (multi_node_) group_->add("skipped-items", skipped);
            report_progress(false);
          },
          0, 0);
    }
    size_t next = 0;
    if (generate_all([&]() -> std::optional<BatchTodo> {
          if (next == todo.size()) return std::nullopt;
          return std::move(todo[next++]);
        }))
      return true;
  }
  if (skipped_in_all)
    log::info("rank {}: skipped {} item(s) whose {} exists", rank_.rank, skipped_in_all,
              plan::label_of(image_format_));
  return false;
}

std::vector<bool> GenerateRun::made_items(const plan::ItemSpan& span) {
  if (o_.overwrite) return std::vector<bool>(static_cast<size_t>(span.size), false);
  std::vector<bool> made;
  made.reserve(static_cast<size_t>(span.size));
  for (int64_t j = 0; j < span.size; ++j) {
    Item it = item_at(span.first + j - shard_begin_);
    // This run's record of the item, built (and its input hashed) only when an earlier record is
    // there to compare it with: most items of a fresh or half-made run have none.
    const auto now = [&] {
      add_input_hashes(it);
      return record_of(it);
    };
    made.push_back(resume_->already_made(it, now, identity_, rank_.rank));
  }
  return made;
}

std::vector<Item> GenerateRun::batch_items(const BatchTodo& todo) const {
  std::vector<Item> batch;
  for (int64_t j = 0; j < todo.span.size; ++j) {
    batch.push_back(item_at(todo.span.first + j - shard_begin_));
    // The plan groups lines that set the same batch fields, so their completed values agree too, but for a size
    // taken from each item's reference (FLUX.2), which the pipeline runs one reference size at a time.
    if (!batch.back().batches_with(batch.front(), /*any_size=*/pipe_->info().size_from_reference))
      throw Error("items " + std::to_string(batch.front().index) + " and " + std::to_string(batch.back().index) +
                  " share a batch but not their size, steps, guidance, settings or LoRAs");
  }
  return batch;
}

void GenerateRun::prepare_chunk(const std::function<std::optional<BatchTodo>()>& next, std::deque<BatchTodo>& chunk) {
  int64_t items = 0;
  while (chunk.empty() || items + chunk.back().span.size <= encode_chunk_) {
    std::optional<BatchTodo> todo = next();
    if (!todo) break;
    items += todo->span.size;
    chunk.push_back(std::move(*todo));
    if (items >= encode_chunk_) break;
  }
  if (chunk.empty()) return;
  // Every batch whole, its made items too: generate() gets the batches as they are here.
  std::vector<std::vector<pipeline::ImageRequest>> requests;
  for (const BatchTodo& todo : chunk) {
    std::vector<pipeline::ImageRequest> batch;
    // An image the prompt reads (Qwen-Image-Edit's vision tower) goes to the encoders; an img2img start and a
    // reference that only joins the denoiser's sequence (Kontext, FLUX.2) matter only to denoising.
    const bool with_image = pipe_->info().prompt_reads_image;
    for (const Item& it : batch_items(todo)) batch.push_back(image_request(it, with_image));
    requests.push_back(std::move(batch));
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!first_batch_) first_batch_ = t0;
  try {
    pipe_->prepare(requests);
    log::debug("rank {}: encoded {} batch(es) of {} item(s) ahead in {:.2f}s", rank_.rank, chunk.size(), items,
               seconds_since(t0));
  } catch (const pipeline::Cancelled&) {
    writer_->rethrow_if_failed();  // cancelled because the writer failed: its error stops the run
    // Stopping: generate_all's next check returns; the chunk's items are left to the next run.
  } catch (const std::exception& e) {
    // generate() encodes what is missing, and reports a batch's own error item by item.
    log::warn("rank {}: encoding {} batch(es) ahead failed ({}); each batch encodes its own", rank_.rank,
              chunk.size(), first_line(e.what()));
  }
  denoise_s_ += seconds_since(t0);
}

bool GenerateRun::generate_all(const std::function<std::optional<BatchTodo>()>& next) {
  std::deque<BatchTodo> chunk;  // with --encode-chunk: the batches encoded ahead, not yet made
  for (;;) {
    if (encode_chunk_ > 0 && chunk.empty()) {
      if (stop_signal()) return true;
      prepare_chunk(next, chunk);
    }
    std::optional<BatchTodo> todo;
    if (!chunk.empty()) {
      todo = std::move(chunk.front());
      chunk.pop_front();
    } else {
      todo = next();
    }
    if (!todo) break;
    if (stop_signal()) return true;
    if (auto why = group_->abort_reason()) return false;
    std::vector<Item> batch = batch_items(*todo);
    std::vector<const Item*> members;
    for (const Item& it : batch) members.push_back(&it);
    // A resumed batch is made whole, its made items beside the missing ones in their
    // places, so that the kernels see the shapes of the first run; those images are
    // not written again.
    const auto made = std::count(todo->made.begin(), todo->made.end(), true);
    if (made) {
      remade_ += made;
      log::debug("rank {}: items {}..{}: making {} item(s) again beside the {} missing (their batch-mates)",
                 rank_.rank, todo->span.first, todo->span.end() - 1, made, todo->span.size - made);
    }
    run_batch(members, todo->made);
  }
  return false;
}

void GenerateRun::run_batch(const std::vector<const plan::Item*>& batch, const std::vector<bool>& made) {
  std::vector<pipeline::ImageRequest> reqs;
  auto t0 = std::chrono::steady_clock::now();
  if (!first_batch_) first_batch_ = t0;
  std::vector<pipeline::RgbImage> images;
  try {
    // An input image that cannot be read fails its item alone (the batch is retried item by item).
    for (const Item* it : batch) reqs.push_back(image_request(*it, /*with_image=*/true));
    images = pipe_->generate(reqs);
    denoise_s_ += seconds_since(t0);
    if (images.size() != batch.size()) throw Error("the pipeline returned " + std::to_string(images.size()) +
                                                   " image(s) for a batch of " + std::to_string(batch.size()));
  } catch (const pipeline::Cancelled&) {
    denoise_s_ += seconds_since(t0);
    writer_->rethrow_if_failed();  // cancelled because the writer failed: its error stops the run
    // Stopping, and --stop-timeout is over: nothing of this batch was written or
    // recorded, so the next run makes its items.
    log::warn("rank {}: abandoned a batch of {} item(s) after {:.1f}s (--stop-timeout {}); the next run makes them",
              rank_.rank, batch.size(), seconds_since(t0), o_.stop_timeout_s);
    return;
  } catch (const std::exception& e) {
    denoise_s_ += seconds_since(t0);
    // Out of memory with one item: no smaller batch to retry, and every next item would fail alike.
    if (batch.size() == 1 && dynamic_cast<const c10::OutOfMemoryError*>(&e))
      out_of_memory("making item " + std::to_string(batch[0]->index), e);
    if (batch.size() > 1) {
      // Find the culprit: one bad item must not fail its batch-mates.
      log::warn("rank {}: a batch of {} failed ({}); retrying its items one by one", rank_.rank, batch.size(),
                first_line(e.what()));
      for (size_t k = 0; k < batch.size(); ++k)
        if (made.empty() || !made[k]) run_batch({batch[k]}, {});
      return;
    }
    if (made.empty() || !made[0]) queue_failure(*batch[0], first_line(e.what()), seconds_since(t0));
    return;
  }
  double per_image = seconds_since(t0) / static_cast<double>(batch.size());
  stats_.busy_s += seconds_since(t0);
  for (size_t k = 0; k < batch.size(); ++k) {
    if (!made.empty() && made[k]) continue;  // a batch-mate made again: its file is there already
    // std::function wants a copyable task: the pixels go by shared pointer, not copied.
    auto img = std::make_shared<const pipeline::RgbImage>(std::move(images[k]));
    writer_->push([this, it = *batch[k], img, per_image]() mutable { write_or_record(it, *img, per_image); }, 1, 1);
  }
}

void GenerateRun::write_or_record(plan::Item& it, const pipeline::RgbImage& img, double seconds) {
  add_input_hashes(it);  // from the bytes the item was made from (InputImages::load)
  if (!img.finite) {
    record_failure(it, "the decoded image contains NaN or Inf (try --dtype fp32 or bf16)", seconds);
    return;
  }
  try {
    write_image(it, img, seconds);
  } catch (const std::exception& e) {
    // A full disk fails every item after this one too: stop now (worker.cpp says so).
    if (is_disk_full(e)) throw;
    record_failure(it, first_line(e.what()), seconds);
  }
}

nlohmann::json GenerateRun::record_of(const plan::Item& it) const {
  return item_record(it, pipe_->info(), &hashes_, layout_);
}

void GenerateRun::write_image(const plan::Item& it, const pipeline::RgbImage& img, double seconds) {
  const pipeline::PipelineInfo& info = pipe_->info();
  nlohmann::json rec = record_of(it);
  rec["sampler"] = info.sampler_label;
  rec["dpinfer_version"] = version();
  const std::string file_name = rec["file_name"];  // record_of(): plan::item_file_name()
  const std::string infotext = a1111_infotext(it, info, &hashes_);
  const std::string record = rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const EncodedImage file = encoder_.encode(img, infotext, record, o_, file_name);
  if (!file.warning.empty()) log::warn("rank {}: item {}: {}", rank_.rank, it.index, file.warning);
  rec.erase("dpinfer_version");
  rec["rank"] = rank_.rank;
  rec["seconds"] = seconds;
  rec["status"] = "ok";
  rec["finished_at"] = wall_seconds();
  sink_->write(it, file_name, file.bytes, std::move(rec));
  ++stats_.generated;
  failures_in_a_row_ = 0;
  int64_t done = count_in_group("done-items", 1);
  if (todo_ >= 0)
    log::debug("rank {}: item {} done ({}/{} of this rank's items, {} generated in all)", rank_.rank, it.index,
               stats_.generated + stats_.skipped + stats_.failed, todo_, done);
  else
    log::debug("rank {}: item {} done ({} generated by this rank, {} in all)", rank_.rank, it.index,
               stats_.generated, done);
  report_progress(false);
}

void GenerateRun::record_failure(plan::Item it, const std::string& message, double seconds) {
  add_input_hashes(it);
  nlohmann::json rec = record_of(it);
  rec.erase("file_name");
  rec["rank"] = rank_.rank;
  rec["seconds"] = seconds;
  rec["status"] = "error";
  rec["error"] = message;
  rec["finished_at"] = wall_seconds();
  manifest_->append(rec);
  ++stats_.failed;
  if (multi_node_) count_in_group("failed-items", 1);
  log::warn("rank {}: item {} failed: {}", rank_.rank, it.index, message);
  report_progress(false);
  if (o_.max_failures_in_a_row > 0 && ++failures_in_a_row_ >= o_.max_failures_in_a_row)
    throw Error("rank " + std::to_string(rank_.rank) + ": stopping after " + std::to_string(failures_in_a_row_) +
                " failed items in a row (--max-failures-in-a-row " + std::to_string(o_.max_failures_in_a_row) +
                "), the last with: " + message +
                "; fix the cause, then run the same command again: it resumes and retries the failed items");
}

void GenerateRun::queue_failure(const plan::Item& it, const std::string& message, double seconds) {
  writer_->push([this, it, message, seconds] { record_failure(it, message, seconds); }, 0, 1);
}

void GenerateRun::finish_writing(bool rethrow) {
  if (!writer_) return;
  const auto grace = std::chrono::seconds(o_.stop_timeout_s);
  if (const int64_t queued = writer_->queued_items(); queued && stop_signal())
    log::info("rank {}: stopping: writing the {} item(s) already made first", rank_.rank, queued);
  const int64_t dropped = writer_->finish([grace] { return stopping_for_at_least(grace); });
  if (dropped)
    log::warn("rank {}: stopped with {} item(s) not yet written after --stop-timeout {}; the next run makes them",
              rank_.rank, dropped, o_.stop_timeout_s);
  // What the sink holds (an open shard), with what the writer finished (a failed writer's error
  // stops the run instead, and those items are made again by the next run).
  if (!writer_->failed()) sink_->flush();
  if (first_batch_) {
    // The denoiser's idle share: of the time from the first batch to the last record,
    // what was not spent in TextToImage::generate() (waiting for the writer, batching,
    // and the writes of the last batch, which nothing overlaps). tools/bench reads it.
    const double span = seconds_since(*first_batch_);
    const double idle = std::max(0.0, span - denoise_s_);
    log::debug("rank {}: denoiser busy {:.3f} s of {:.3f} s, idle {:.3f} s ({:.2f}%); writer busy {:.3f} s, "
               "{:.3f} s waited for room (--write-queue {})",
               rank_.rank, denoise_s_, span, idle, span > 0 ? 100.0 * idle / span : 0.0, writer_->busy_s(),
               writer_->waited_s(), o_.write_queue);
  }
  if (rethrow) writer_->rethrow_if_failed();
}

int64_t GenerateRun::count_in_group(const char* counter, int64_t delta) noexcept {
  try {
    return group_->add(counter, delta);
  } catch (const std::exception& e) {
    log::debug("rank {}: counter '{}' not updated: {}", rank_.rank, counter, first_line(e.what()));
    return -1;
  }
}

int GenerateRun::finish_stopped() {
  int sig = stop_signal();
  log::warn("rank {}: stopped by {} after {} image(s); the manifest is complete up to here, and a new run "
            "resumes where this one stopped",
            rank_.rank, signal_name(sig), stats_.generated);
  return exit_status::kSignalBase + sig;
}

int GenerateRun::finish(const pipeline::PipelineInfo& info, const plan::OuterShard& shard) {
  nlohmann::json mine = stats_.to_json();
  const nlohmann::json own_counts = pipe_->statistics();  // a step cache's counts (TextToImage::statistics)
  if (!own_counts.empty()) mine["pipeline"] = own_counts;
  const nlohmann::json offload_counts = pipe_->offload_statistics();  // --offload's moves (TextToImage)
  if (!offload_counts.empty()) log::debug("rank {}: offload {}", rank_.rank, offload_counts.dump());
  auto all_stats = group_->gather("stats", mine.dump());
  group_->barrier("finished");
  if (rank_.rank != 0) return stats_.failed ? exit_status::kItemsFailed : exit_status::kSuccess;
  RankStats total;
  nlohmann::json per_rank = nlohmann::json::array();
  nlohmann::json counted = nlohmann::json::object();  // the ranks' pipeline counts, summed
  for (const auto& s : all_stats) {
    auto j = nlohmann::json::parse(s);
    total.generated += j["generated"].get<int64_t>();
    total.skipped += j["skipped"].get<int64_t>();
    total.failed += j["failed"].get<int64_t>();
    if (j.contains("pipeline")) {
      for (const auto& [key, value] : j["pipeline"].items()) {
        if (value.is_number_integer())
          counted[key] = counted.value(key, int64_t{0}) + value.get<int64_t>();
        else if (value.is_string())
          counted[key] = value;  // a name ("step_cache"), the same on every rank
      }
    }
    per_rank.push_back(j);
  }
  if (multi_node_) group_totals_ = plan::ProgressCounts{total.generated, total.skipped, total.failed};
  io::MergeResult merged = io::merge_manifests(o_.out);
  if (!merged.no_index_why.empty()) log::warn("--layout webdataset: no parquet index written: {}", merged.no_index_why);
  double wall = wall_seconds() - started_at_;
  nlohmann::json summary = {{"generated", total.generated}, {"skipped", total.skipped}, {"failed", total.failed},
                            {"wall_seconds", wall}, {"per_rank", per_rank},
                            {"images_per_second", wall > 0 ? total.generated / wall : 0.0},
                            {"metadata_rows", merged.ok}, {"failure_rows", merged.failed}};
  for (const auto& [key, value] : counted.items()) summary[key] = value;
  sink_->finish_run(*items_, summary);  // --layout dpg's grids
  write_run_json(info, shard, &summary);
  log::info("done: {} generated, {} skipped, {} failed in {:.1f}s ({:.2f} images/s); {} row(s) in {}/metadata.jsonl",
            total.generated, total.skipped, total.failed, wall, wall > 0 ? total.generated / wall : 0.0, merged.ok,
            o_.out);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    double secs = per_rank[r]["seconds"].get<double>();
    int64_t generated = per_rank[r]["generated"].get<int64_t>();
    log::info("  rank {}: {} generated, {} skipped, {} failed, {:.2f} images/s", r, generated,
              per_rank[r]["skipped"].get<int64_t>(), per_rank[r]["failed"].get<int64_t>(),
              secs > 0 ? static_cast<double>(generated) / secs : 0.0);
  }
  if (const int64_t calls = counted.value("denoiser_calls", int64_t{0}))
    log::info("{}: {} of {} denoiser calls ({:.1f}%) {}", counted.value("step_cache", std::string("step cache")),
              counted.value("denoiser_calls_cached", int64_t{0}), calls,
              100.0 * static_cast<double>(counted.value("denoiser_calls_cached", int64_t{0})) / static_cast<double>(calls),
              counted.value("step_cache_skip", std::string("reused a cached step")));
  if (merged.torn_lines) log::warn("{} torn manifest line(s) from an interrupted run were ignored", merged.torn_lines);
  if (total.failed) {
    log::warn("{} item(s) failed; see {}/failures.jsonl", total.failed, o_.out);
    return exit_status::kItemsFailed;
  }
  return exit_status::kSuccess;
}

void GenerateRun::out_of_memory(const std::string& what, const std::exception& e) const {
  const std::string device = pipe_ ? pipe_->info().device : resolve_device(o_.device, rank_);
  std::string advice;
  if (memory_plan_.is_null() && !o_.max_device_memory.empty()) {
    // The plan was made (the load runs after it) but its estimate missed the load's own peak.
    advice = "the load needed more than --max-device-memory " + o_.max_device_memory +
             "'s plan estimated; give a larger budget, or the options (--weight-storage, --offload) yourself";
  } else if (memory_plan_.is_null()) {
    advice = "plan the run's memory with --max-device-memory auto (or a number of GB), or lower --batch-size or the "
             "image size";
  } else {
    const std::string next = memory_plan_["next"].get<std::string>();
    const std::string plan = memory_plan_["choice"].get<std::string>();
    advice = next.empty() ? "the plan (" + plan + ") fell short and nothing smaller is left; lower --batch-size or the "
                            "image size"
                          : "the plan (" + plan + ") fell short; give " + next + " yourself, or a lower "
                            "--max-device-memory, which chooses it";
  }
  throw OutOfMemory(what + " ran out of memory on " + device + " (" + first_line(e.what()) + "); " + advice);
}

void GenerateRun::write_run_json(const pipeline::PipelineInfo& info, const plan::OuterShard& shard, const nlohmann::json* summary) {
  nlohmann::json j = {{"dpinfer_version", version()},
                      {"options", o_.to_json()},
                      {"world_size", rank_.world_size},
                      {"rank_source", rank_.source},
                      {"shard", {{"index", shard.index}, {"count", shard.count}}},
                      {"items_total", total_items_},
                      {"items_in_shard", shard_size_},
                      {"started_at", started_at_},
                      {"pipeline",
                       {{"family", info.family}, {"pipeline_class", info.pipeline_class}, {"model", info.model_name},
                        {"model_path", info.model_path}, {"model_revision", info.model_revision},
                        {"single_file", info.single_file},
                        {"scheduler", info.scheduler_name}, {"sampler", info.sampler_label}, {"device", info.device},
                        {"dtype", info.dtype}, {"vae_tiling", info.vae_tiling},
                        {"weight_storage", info.weight_storage.empty() ? "default" : info.weight_storage},
                        {"attention_backend", info.attention_backend.empty() ? "auto" : info.attention_backend},
                        {"channels_last", info.channels_last},
                        {"fp8_compute", info.fp8_compute.empty() ? "off" : info.fp8_compute},
                        {"cuda_graphs", info.cuda_graphs},
                        {"model_hash", hashes_.model.empty() ? nlohmann::json() : nlohmann::json(hashes_.model)}}},
                      // What a prompts line that sets none gets: the options, else the model's defaults.
                      {"item_defaults",
                       {{"negative_prompt", defaults_.negative_prompt}, {"seed", defaults_.seed},
                        {"seed_from", plan::to_string(defaults_.seed_from)},
                        {"steps", defaults_.steps}, {"guidance_scale", defaults_.guidance_scale},
                        {"width", defaults_.width}, {"height", defaults_.height}, {"settings", defaults_.settings},
                        {"loras", plan::lora_set_json(defaults_.loras)}}}};
  if (!memory_plan_.is_null()) {
    j["memory_plan"] = memory_plan_["record"];
    if (summary) {
      // The counting allocator's peaks (the device's caching allocator on a GPU): the run's and each phase's.
      const nlohmann::json counts = pipe_->offload_statistics();
      if (counts.contains("peak_bytes")) j["memory_plan"]["measured_peak_bytes"] = counts["peak_bytes"];
      if (counts.contains("peak_bytes_by_phase")) j["memory_plan"]["measured_peak_bytes_by_phase"] = counts["peak_bytes_by_phase"];
    }
  }
  if (!hashes_.loras.empty()) j["lora_hashes"] = hashes_.loras;  // absolute path -> SHA-256 (model_hashes.h)
  std::error_code ec;
  if (o_.prompts != "-") j["prompts_path"] = fs::absolute(o_.prompts, ec).lexically_normal().string();
  if (slurm_.in_job()) j["slurm"] = slurm_.to_json();
  if (summary) j["summary"] = *summary;
  // Paths are bytes, not always UTF-8 (a Latin-1 file name): replace what JSON cannot hold.
  io::write_file_atomically((fs::path(o_.out) / "run.json").string(),
                            j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace dpinfer::worker

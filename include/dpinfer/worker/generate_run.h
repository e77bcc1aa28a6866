#pragma once
// One run of `dpinfer generate` on one rank: join the group, load the pipeline, take
// this rank's items, make them in batches, write each image and its record, and on
// rank 0 merge the manifests at the end.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/plan/batches.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/plan/progress_report.h"
#include "dpinfer/plan/rank_info.h"
#include "dpinfer/plan/sharding.h"
#include "dpinfer/util/clock.h"
#include "dpinfer/worker/input_images.h"
#include "dpinfer/worker/model_hashes.h"
#include "dpinfer/worker/progress_pipe.h"
#include "dpinfer/worker/resume.h"
#include "dpinfer/worker/image_encoder.h"
#include "dpinfer/worker/output_sink.h"
#include "dpinfer/worker/slurm_job.h"
#include "dpinfer/worker/worker.h"
#include "dpinfer/worker/worker_group.h"
#include "dpinfer/worker/write_queue.h"

namespace dpinfer::worker {

/// This rank's counts, gathered by rank 0 at the end.
struct RankStats {
  int64_t generated = 0, skipped = 0, failed = 0;
  double busy_s = 0;
  nlohmann::json to_json() const {
    return {{"generated", generated}, {"skipped", skipped}, {"failed", failed}, {"seconds", busy_s}};
  }
};

/// True when `e` is a write that failed for want of space: ENOSPC, or EDQUOT (a quota).
/// The worker then stops at once instead of failing every item after it.
bool is_disk_full(const std::exception& e);

class GenerateRun {
 public:
  GenerateRun(const plan::GenerateOptions& o, const PipelineFactory& factory)
      : o_(o),
        factory_(factory),
        image_format_(plan::parse_image_format(o.image_format)),
        layout_{plan::parse_layout(o.layout), image_format_, o.files_per_dir},
        encoder_(image_encoder(image_format_)) {}

  /// Runs the worker: joins the group, loads the pipeline, makes this rank's items,
  /// and on rank 0 merges the manifests. Returns the exit status; throws on failure
  /// (run_generate() maps the exceptions to statuses).
  int run();

  /// Tells the other ranks that this one failed, so they stop instead of waiting.
  void abort(const std::string& why);

  /// --requeue-on-signal, once the run is over: `status` 128+sig means a signal stopped it.
  void requeue_if_stopped(int status) const;

  /// Tells the launcher how far this rank is (plan/progress_report.h): at most every
  /// kProgressInterval unless `force`, and only once the items are known.
  void report_progress(bool force) noexcept;

 private:
  /// One batch to make: its items, and which of them an earlier run made (made again, as
  /// batch-mates, but not written).
  struct BatchTodo {
    plan::ItemSpan span;
    std::vector<bool> made;
  };

  /// Static modes: this rank's batches, in order. Returns true when stopped by a signal.
  bool run_static();

  /// Dynamic mode: claim chunks of batches from the shared counter.
  bool run_dynamic();

  /// Per item of `span`: whether an earlier run made it (its file and record are there;
  /// Resume), never with --overwrite. The one resume check of both modes.
  std::vector<bool> made_items(const plan::ItemSpan& span);

  /// Checks each line's size against the family's multiple and completes its settings
  /// (resolve_settings(), then TextToImage::check_settings()), once per line rather than
  /// per item; throws InputError naming the prompts file's line. Fills line_settings_
  /// and run_settings_, which item_at() gives each item.
  void check_lines(const pipeline::PipelineInfo& info);

  /// Makes every LoRA path of the run and of the prompt lines absolute (against the current
  /// directory), refusing one that is not a file (InputError naming the option or line).
  void resolve_lora_paths(std::vector<io::PromptSpec>& specs, io::LoraSet& run_loras) const;

  /// Makes every input image path absolute: --image against the current directory, a line's
  /// `image` against the prompts file's folder (so a dataset's JSONL names its images as it
  /// ships them). Refuses, before any weights load, one that is not a readable file (UsageError
  /// naming the option, or the file and line). Returns --image resolved ("" when not given).
  std::string resolve_image_paths(std::vector<io::PromptSpec>& specs);

  /// What the pipeline makes of `it`; with `with_image`, its input image decoded and resized to
  /// its size (InputError naming the file when it cannot be).
  pipeline::ImageRequest image_request(const plan::Item& it, bool with_image);

  /// Hashes the model and every LoRA the run names (model_hashes.h), through the cache beside
  /// run.json; rank 0 writes the cache, the other ranks read it once rank 0 has.
  void compute_hashes(const pipeline::PipelineInfo& info, const std::vector<io::PromptSpec>& specs);

  /// Item `position` of this run's shard, made on demand, with its completed settings (its input
  /// hashes are not: add_input_hashes() fills them where a record needs them).
  plan::Item item_at(int64_t position) const;

  /// Fills the SHA-256 of `it`'s input image and mask, if it has them (InputImages::sha256).
  void add_input_hashes(plan::Item& it) const;

  /// Generates the batches `next` gives, until nullopt, each whole; with --encode-chunk, in
  /// two-phase chunks (prepare_chunk). Returns true when stopped by a signal.
  bool generate_all(const std::function<std::optional<BatchTodo>()>& next);

  /// The items of `todo`, checked to share their batch fields.
  std::vector<plan::Item> batch_items(const BatchTodo& todo) const;

  /// Takes batches from `next` into `chunk`, whole, up to --encode-chunk items (one batch at
  /// least), and has the pipeline encode their prompts ahead (TextToImage::prepare).
  void prepare_chunk(const std::function<std::optional<BatchTodo>()>& next, std::deque<BatchTodo>& chunk);

  /// Generates one batch and hands the images and records of its items that are not
  /// `made` (empty: none is) to the writer (writer_).
  void run_batch(const std::vector<const plan::Item*>& batch, const std::vector<bool>& made);

  /// The writer's task for one image: write it and record it, or record why it could
  /// not be written. A full disk throws (and stops the run).
  void write_or_record(plan::Item& it, const pipeline::RgbImage& img, double seconds);

  void write_image(const plan::Item& it, const pipeline::RgbImage& img, double seconds);

  /// item_record() of `it` for this run: the model's info and hashes, the file name of its
  /// --layout, --image-format and --files-per-dir.
  nlohmann::json record_of(const plan::Item& it) const;

  /// Records `it` as failed; throws, stopping the run, once --max-failures-in-a-row items in a row have failed.
  void record_failure(plan::Item it, const std::string& message, double seconds);

  /// Queues record_failure() behind the images before it.
  void queue_failure(const plan::Item& it, const std::string& message, double seconds);

  /// Once the loop is over: waits until the writer has written and recorded what it
  /// holds (after a stop signal, only until --stop-timeout has passed since it came;
  /// what is left then is the next run's), then rethrows the writer's error, if any,
  /// unless `rethrow` is false (the run is ending by another exception). Logs, at -v,
  /// how long the denoiser was idle.
  void finish_writing(bool rethrow);

  /// Adds to a group-wide progress counter once an item is recorded; returns its new
  /// value, or -1. A store that has gone away by then (rank 0 stopped first, on a
  /// signal) must not turn a recorded item into a failed one: the count is only progress.
  int64_t count_in_group(const char* counter, int64_t delta) noexcept;

  int finish_stopped();

  int finish(const pipeline::PipelineInfo& info, const plan::OuterShard& shard);

  void write_run_json(const pipeline::PipelineInfo& info, const plan::OuterShard& shard, const nlohmann::json* summary);

  const plan::GenerateOptions& o_;
  const PipelineFactory& factory_;
  /// --encode-chunk, or the chunk --max-device-memory's plan chose when it turned two-phase on (0: off).
  int encode_chunk_ = 0;
  /// --max-device-memory's plan (TextToImage::memory_plan()), null when none was asked for.
  nlohmann::json memory_plan_;
  /// An out-of-memory error of `what` ("making item 12", "loading the model") as OutOfMemory: the budget
  /// and the next option to try.
  [[noreturn]] void out_of_memory(const std::string& what, const std::exception& e) const;
  const plan::ImageFormat image_format_;
  const plan::OutputLayout layout_;  ///< where each item's image goes (--layout, --image-format, --files-per-dir)
  /// --image-format's row (image_encoder.h): how each image becomes its file.
  const ImageEncoder& encoder_;
  /// --layout's sink (output_sink.h): where each made item and its record go (written on the
  /// writer thread; made once the manifest is open).
  std::unique_ptr<OutputSink> sink_;
  plan::RankInfo rank_;
  const SlurmJob slurm_ = SlurmJob::from_env();
  plan::ShardMode mode_ = plan::ShardMode::kContiguous;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<pipeline::TextToImage> pipe_;
  std::optional<plan::ItemList> items_;  ///< the whole prompts file's items, made on demand
  std::optional<plan::BatchPlan> batches_;  ///< the whole prompts file's batches (plan/batches.h)
  int64_t shard_batch_begin_ = 0;        ///< the outer shard: batches [shard_batch_begin_, + shard_batches_)
  int64_t shard_batches_ = 0;
  int64_t shard_begin_ = 0;              ///< the same as items [shard_begin_, shard_begin_ + shard_size_)
  int64_t shard_size_ = 0;
  int64_t remade_ = 0;                   ///< items made again as batch-mates of missing ones (resume)
  std::vector<nlohmann::json> line_settings_;  ///< per line: its completed settings, or null for run_settings_
  nlohmann::json run_settings_;                ///< the completed settings of lines that set none
  int64_t total_items_ = 0;
  plan::ItemDefaults defaults_;  ///< resolved item defaults (run.json)
  /// The record fields resume compares, with their fallbacks (identity_fields()), made once.
  std::vector<std::pair<std::string, nlohmann::json>> identity_;
  RunHashes hashes_;             ///< the model's and the LoRAs' SHA-256 (infotext, records)
  mutable InputImages input_images_;  ///< img2img items' images: hashed once, decoded when made
  std::string run_mask_;              ///< --mask, resolved (resolve_image_paths)
  std::unique_ptr<io::ManifestWriter> manifest_;
  RankStats stats_;
  int64_t failures_in_a_row_ = 0;  ///< failed records since the last image (the writer's, like stats_)
  double started_at_ = wall_seconds();
  bool multi_node_ = false;
  ProgressPipe progress_ = ProgressPipe::from_env();
  std::optional<Resume> resume_;  ///< made with the sink
  bool items_known_ = false;  ///< this rank's share is known: progress reports may start
  int64_t todo_ = -1;         ///< this rank's items in a static mode, skipped ones included
  std::chrono::steady_clock::time_point last_report_{};
  std::optional<plan::ProgressCounts> group_totals_;  ///< rank 0, multi-node: the gathered totals
  /// Runs the writes and records, in order, on its thread (--write-queue); during the
  /// loop it alone touches manifest_, stats_' counts and progress_.
  std::unique_ptr<WriteQueue> writer_;
  std::optional<std::chrono::steady_clock::time_point> first_batch_;  ///< when the first batch began
  double denoise_s_ = 0;  ///< seconds in TextToImage::generate(), failed and abandoned batches included
};

}  // namespace dpinfer::worker
